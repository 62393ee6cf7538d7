"""kind="json" episodes: named objects become entities, known string fields become facts."""
from __future__ import annotations

import json
from datetime import datetime

from pgmemory.extract.offline.state import Registry
from pgmemory.extract.types import ExtractedFact, Extraction

_JSON_KEYS = {  # key -> (relation, label, functional, phrase)
    **dict.fromkeys(["company", "employer", "organization", "organisation", "workplace"],
                    ("WORKS_FOR", "Organization", True, "works for")),
    **dict.fromkeys(["city", "residence"], ("LIVES_IN", "Place", True, "lives in")),
    "location": ("LOCATED_IN", "Place", True, "is located in"),
    **dict.fromkeys(["hometown", "birthplace"], ("IS_FROM", "Place", False, "is from")),
    **dict.fromkeys(["school", "university", "college"],
                    ("STUDIES_AT", "Organization", True, "studies at")),
    **dict.fromkeys(["spouse", "wife", "husband"], ("MARRIED_TO", "Person", True, "is married to")),
}


def extract_json(content: str, reference: datetime) -> Extraction:
    """Entities for named objects and facts for their company/city/school/... string fields."""
    data = json.loads(content)
    registry, facts = Registry(), []
    for pos, obj in enumerate(data if isinstance(data, list) else [data]):
        if not isinstance(obj, dict):
            continue
        raw = obj.get("name") if isinstance(obj.get("name"), str) else obj.get("id")
        if not isinstance(raw, (str, int)) or isinstance(raw, bool) or not str(raw).strip():
            continue
        kind = next((obj[k] for k in ("type", "label", "kind")
                     if isinstance(obj.get(k), str) and obj[k]), None)
        label = kind[0].upper() + kind[1:] if kind else None
        name = registry.add(str(raw).strip(), label, 2 * pos)
        for key, value in obj.items():
            spec = _JSON_KEYS.get(key.lower())
            if spec is None or not isinstance(value, str) or not value.strip():
                continue
            relation, target_label, functional, phrase = spec
            if value.strip().lower() == name.lower():
                continue
            target = registry.add(value.strip(), target_label, 2 * pos + 1)
            facts.append(ExtractedFact(
                source=name, target=target, relation=relation, fact=f"{name} {phrase} {target}.",
                valid_at=reference, functional=functional, attributes={"json_key": key}))
    return Extraction(entities=registry.ordered(), facts=facts)
