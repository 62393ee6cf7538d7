"""Resolve time expressions in English text against an episode's reference time.

Calendar arithmetic happens on the speaker's local date: the reference's own UTC offset
(at 2023-05-08T23:30-05:00 "yesterday" is May 7, although it is already May 9 in UTC), one
fixed offset for every date it resolves (an offset, not a zone: no daylight-saving rules).
Every result is a UTC datetime: a date without a time of day is its local midnight in that
offset (00:00:00 UTC for a UTC reference), a year alone January 1st, a month alone its 1st
(the paper's temporal rules), so a day is the local day [midnight, next midnight).

Covered: yesterday / today / tomorrow / last night / tonight / this morning /
the day before yesterday; "N days|weeks|months|years ago" (digits, number
words up to twelve, "a", "a couple of", "a few" = 3); last|this|next
week|month|year; "last summer|winter|spring|fall|autumn" and "summer 2019";
weekdays with last|next|this|on (also "last Fri"); "last weekend" (the one before the
weekend the reference is in or just after), "over the weekend" (the latest), "this weekend"
(the Saturday and Sunday of the reference's week); last|this|next March; "May 8, 2023", "8 May 2023", "8th of May,
2023", "2023-05-08", "May 8" (most recent on or before the reference), each
also after a preposition ("since March 3" is one mention, not "since March");
"in|since|from|during|by|around|back in March" (most recent March on or
before the reference) and "March 2020"; "in|since|... 2019".
Conventions: "last week" is exactly 7 days back (the paper's example: said on
2024-01-15, "last week" is ~2024-01-08) and "next week" 7 days ahead, while "this week" is
the calendar week the reference is in, from its Monday (as "this month" is from the 1st: a
week of 7 days from the reference would leave out its own past days); "last month|year" is the first day
of the previous calendar month|year; seasons are meteorological
(northern hemisphere: spring Mar 1, summer Jun 1, fall Sep 1, winter Dec 1)
and "last <season>" is the latest start of that season whose season is not
the one the reference falls in; "last March" is the latest March before the
reference's month; a bare weekday ("on Friday") is the most
recent one strictly before the reference day.  A bare weekday, "in March" and
"on May 8" say neither past nor future: they resolve to the most recent one
and are marked ``assumed_past`` (right only when the verb speaks of the past).
Bounds: a time after "since", "from", "starting (in|on)" is where a span starts
(``bound`` "since"); after "until", "till", "up to" where it stops ("until"),
after "through" the last period it includes ("through").  A range "from|since A
to|until|till|through|- B" or "between A and B" is one mention valued at A, its
end in ``to`` (B's own mention, bound "through" for "to|through|and|-": the
span includes B's period, as in "from Monday to Wednesday"; "until" for
"until|till"): the bare year or month of B needs no preposition ("from 2018 to
2020").  A B that resolves before A ("from May to March") is no range: A stays
a start.  A time after other words has bound "at" (during, or at, that time).
Not covered: clock times ("at 3pm"), numeric dates other than ISO
("05/08/2023"), ordinal weeks ("the first week of May"), vague words
("recently", "a while ago") and anything non-English.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date, datetime, time, timedelta, timezone
from typing import Callable

_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6,
    "july": 7, "august": 8, "september": 9, "october": 10, "november": 11,
    "december": 12, "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7,
    "aug": 8, "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}
_WEEKDAYS = {
    "monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4,
    "saturday": 5, "sunday": 6,
}
_SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11,
    "twelve": 12, "a couple of": 2, "couple of": 2, "a couple": 2, "a few": 3,
    "few": 3,
}

# Month names must be capitalised ("may" is usually the modal verb).
_MONTH = (
    r"(?-i:(?P<month>January|February|March|April|May|June|July|August|September"
    r"|October|November|December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?)"
)
_YEAR = r"(?P<year>(?:19|20)\d{2})"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_PREP = (r"(?:in|since|from|during|by|around|back\s+in|of|until|till|through|up\s+to|between)\s+"
         r"(?:early\s+|late\s+|mid-?\s*)?")
_NUM = (r"(?P<n>\d+|a\s+couple\s+of|couple\s+of|a\s+couple|a\s+few|few|an?|one|two|three|four"
        r"|five|six|seven|eight|nine|ten|eleven|twelve)")
_UNIT = r"(?P<unit>day|week|month|year)s?"


@dataclass(frozen=True)
class TimeMention:
    """A time expression found in text: its span, its words, its UTC value, and ``until``, the
    exclusive end of the period it names (the next day for a day, the next month for "in
    March", the next year for "in 2019"): a one-off event said to happen then lies in
    [value, until)."""

    start: int
    end: int
    text: str
    value: datetime
    until: datetime | None = None
    bound: str = "at"  # "at" | "since" | "until" | "through": see the module docstring
    to: "TimeMention | None" = None  # a range's end ("from 2018 to 2020": the mention of 2020)
    # The words say neither past nor future ("on Monday", "in March", "on May 8"): the most
    # recent one was taken, which is right only when the verb speaks of the past.
    assumed_past: bool = False

    def starts(self) -> datetime | None:
        """Where the span it names starts: its value, unless it is an "until"/"through" bound."""
        return None if self.bound in ("until", "through") else self.value

    def stops(self) -> datetime | None:
        """Where a span it bounds stops (exclusive): an "until" bound's value (the earliest end
        the words allow, as "left in 2020" ends at 2020-01-01), a "through" bound's period end,
        a range's end (its ``to``); None when it names no end."""
        if self.to is not None:
            return self.to.stops()
        if self.bound == "until":
            return self.value
        if self.bound == "through":
            return self.until
        return None


def to_utc(reference: datetime) -> datetime:
    """Return the reference in UTC; naive datetimes are rejected (no guessing a zone)."""
    if reference.tzinfo is None or reference.utcoffset() is None:
        raise ValueError("reference datetime must be timezone-aware")
    return reference.astimezone(timezone.utc)


def zone_of(reference: datetime) -> timezone:
    """The reference's UTC offset (the one it has at that instant) as a fixed zone."""
    to_utc(reference)
    return timezone(reference.utcoffset())


def _midnight(d: date, zone: timezone = timezone.utc) -> datetime:
    """Midnight of day ``d`` in ``zone`` (aware, in that zone)."""
    return datetime.combine(d, time(0, 0), tzinfo=zone)


def _in_utc(t: TimeMention) -> TimeMention:
    """The mention with its times (and its range end's) as UTC datetimes."""
    return replace(t, value=to_utc(t.value), until=t.until and to_utc(t.until),
                   to=t.to and _in_utc(t.to))


def _add_months(d: date, months: int) -> date:
    index = d.year * 12 + (d.month - 1) + months
    year, month = divmod(index, 12)
    month += 1
    days_in_month = (date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)).day
    return date(year, month, min(d.day, days_in_month))


def _shift(d: date, n: int, unit: str) -> date:
    if unit == "day":
        return d + timedelta(days=n)
    if unit == "week":
        return d + timedelta(weeks=n)
    if unit == "month":
        return _add_months(d, n)
    return _add_months(d, 12 * n)


def _number(words: str) -> int:
    words = " ".join(words.lower().split())
    return int(words) if words.isdigit() else _NUMBERS[words]


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _most_recent(ref: date, month: int, day: int = 1) -> date | None:
    candidate = _safe_date(ref.year, month, day)
    if candidate is not None and candidate > ref:
        candidate = _safe_date(ref.year - 1, month, day)
    return candidate


def _ago(m: re.Match[str], ref: date) -> date | None:
    return _shift(ref, -_number(m["n"]), m["unit"].lower())


def _relative_day(m: re.Match[str], ref: date) -> date | None:
    word = " ".join(m[0].lower().split())
    if "before yesterday" in word:
        return ref - timedelta(days=2)
    if word in ("yesterday", "last night"):
        return ref - timedelta(days=1)
    if word == "tomorrow":
        return ref + timedelta(days=1)
    return ref


def _relative_period(m: re.Match[str], ref: date) -> date | None:
    which, unit = m["which"].lower(), m["unit"].lower()
    step = {"last": -1, "this": 0, "next": 1}[which]
    if unit == "week":  # last|next: 7 days back|ahead; this: the calendar week's Monday
        return ref + timedelta(weeks=step) if step else ref - timedelta(days=ref.weekday())
    if unit == "month":
        return _add_months(ref.replace(day=1), step)
    return date(ref.year + step, 1, 1)


def _month_named(m: re.Match[str], ref: date) -> date | None:
    """"last March": the latest March before the reference's month (said in December, this
    year's; said in January or in March, last year's); "this March": the reference year's;
    "next March": the first March after the reference's month."""
    month, which = _MONTHS[m["month"].lower()], m["which"].lower()
    if which == "this":
        return date(ref.year, month, 1)
    if which == "last":
        return date(ref.year if month < ref.month else ref.year - 1, month, 1)
    return date(ref.year if month > ref.month else ref.year + 1, month, 1)


def _weekend(m: re.Match[str], ref: date) -> date | None:
    """The Saturday of a weekend: "last weekend" the one before the weekend the reference is in
    or just after (said on Monday: the two days before; on Saturday or Sunday: the week before);
    "over the weekend" the latest one on or before the reference; "this weekend" the one of the
    reference's week (said Monday to Friday: the coming one; on Saturday or Sunday: that one)."""
    latest = ref - timedelta(days=(ref.weekday() - 5) % 7)
    which = m["which"].lower()
    if which == "this":
        return ref + timedelta(days=5 - ref.weekday())
    return latest - timedelta(weeks=1) if which == "last" and ref.weekday() >= 5 else latest


def _last_season(m: re.Match[str], ref: date) -> date | None:
    start = _most_recent(ref, _SEASONS[m["season"].lower()])
    assert start is not None
    if ref < _add_months(start, 3):
        start = start.replace(year=start.year - 1)
    return start


def _season_of_year(m: re.Match[str], ref: date) -> date | None:
    return date(int(m["year"]), _SEASONS[m["season"].lower()], 1)


def _weekday(m: re.Match[str], ref: date) -> date | None:
    target = _WEEKDAYS[next(d for d in _WEEKDAYS if d.startswith(m["weekday"].lower()))]
    which = (m["which"] or "on").lower()
    if which == "next":
        return ref + timedelta(days=(target - ref.weekday() - 1) % 7 + 1)
    if which == "this":
        return ref + timedelta(days=(target - ref.weekday()) % 7)
    return ref - timedelta(days=(ref.weekday() - target - 1) % 7 + 1)


def _full_date(m: re.Match[str], ref: date) -> date | None:
    return _safe_date(int(m["year"]), _MONTHS[m["month"].lower()], int(m["day"]))


def _iso_date(m: re.Match[str], ref: date) -> date | None:
    return _safe_date(int(m["year"]), int(m["mm"]), int(m["day"]))


def _month_day(m: re.Match[str], ref: date) -> date | None:
    return _most_recent(ref, _MONTHS[m["month"].lower()], int(m["day"]))


def _month_year(m: re.Match[str], ref: date) -> date | None:
    return date(int(m["year"]), _MONTHS[m["month"].lower()], 1)


def _month_only(m: re.Match[str], ref: date) -> date | None:
    return _most_recent(ref, _MONTHS[m["month"].lower()])


def _year_only(m: re.Match[str], ref: date) -> date | None:
    return date(int(m["year"]), 1, 1)


def _period(resolve: "_Resolver", m: re.Match[str], start: date) -> date:
    """The exclusive end of the period a resolved expression names."""
    if resolve is _relative_period:
        unit = m["unit"].lower()
        return start + timedelta(weeks=1) if unit == "week" else _shift(start, 1, unit)
    if resolve in (_last_season, _season_of_year):
        return _add_months(start, 3)
    if resolve is _weekend:
        return start + timedelta(days=2)
    if resolve in (_month_year, _month_only, _month_named):
        return _add_months(start, 1)
    if resolve is _year_only:
        return date(start.year + 1, 1, 1)
    return start + timedelta(days=1)


_Resolver = Callable[[re.Match[str], date], "date | None"]
_RULES: list[tuple[re.Pattern[str], _Resolver]] = [
    (re.compile(p, re.IGNORECASE), f)
    for p, f in [
        (rf"\b{_NUM}\s+{_UNIT}\s+ago\b", _ago),
        (r"\b(?:the\s+day\s+before\s+yesterday|yesterday|last\s+night|today|tonight"
         r"|tomorrow|this\s+(?:morning|afternoon|evening))\b", _relative_day),
        (r"\b(?P<which>last|this|next)\s+(?P<unit>week|month|year)\b", _relative_period),
        (r"\blast\s+(?P<season>spring|summer|fall|autumn|winter)\b", _last_season),
        (r"\b(?P<which>last|this|over\s+the)\s+weekend\b", _weekend),
        (rf"\b(?P<which>last|this|next)\s+{_MONTH}(?!\w)", _month_named),
        (rf"\b(?:(?:in\s+)?the\s+)?(?P<season>spring|summer|fall|autumn|winter)\s+(?:of\s+)?"
         rf"{_YEAR}\b", _season_of_year),
        (r"\b(?:(?P<which>last|next|this|on)\s+)?(?P<weekday>monday|tuesday|wednesday|thursday"
         r"|friday|saturday|sunday)\b", _weekday),
        (r"\b(?P<which>last|next|this|on)\s+"
         r"(?-i:(?P<weekday>Mon|Tues|Tue|Wed|Thurs|Thur|Thu|Fri|Sat|Sun))\b\.?", _weekday),
        # (a preposition is part of a day's mention, as of a month's: else "since March" would
        # start earlier and win over "March 3" in "since March 3")
        (rf"\b(?:on\s+|{_PREP})?{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", _full_date),
        (rf"\b(?:on\s+|{_PREP})?(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", _full_date),
        (rf"\b(?:on\s+|{_PREP})?(?P<year>\d{{4}})-(?P<mm>\d{{2}})-(?P<day>\d{{2}})\b", _iso_date),
        (rf"\b(?:on\s+|{_PREP})?{_MONTH}\s+{_DAY}\b", _month_day),
        (rf"\b(?:on\s+|{_PREP})?the\s+{_DAY}\s+of\s+{_MONTH}(?!\w)", _month_day),
        (rf"\b(?:{_PREP})?{_MONTH}\s+(?:of\s+)?{_YEAR}\b", _month_year),
        (rf"\b{_PREP}{_MONTH}(?!\w)", _month_only),
        (rf"\b{_PREP}{_YEAR}\b", _year_only),
    ]
]
# The words that make a mention a bound: at its own start ("since 2019" is one mention), or just
# before it ("since last year").
_BOUND_WORDS = (("since", r"since|from|between|starting(?:\s+(?:in|on|from))?|beginning(?:\s+(?:in|on))?"),
                ("until", r"until|till|up\s+to"), ("through", r"through"))
_BOUNDS = [(bound, re.compile(rf"^(?:{words})\b", re.IGNORECASE), re.compile(rf"\b(?:{words})\s+$", re.IGNORECASE))
           for bound, words in _BOUND_WORDS]
# What joins a range's two ends: "from A to B", "between A and B", "2018-2020".
_RANGE_JOIN = {"from": re.compile(r"\s*(?:(?P<until>until|till)|to|through|-|\u2013|\u2014)\s*", re.IGNORECASE),
               "between": re.compile(r"\s+and\s+", re.IGNORECASE)}
# A range's end needs no preposition of its own: "from 2018 to 2020", "from March to May 2020".
_BARE_END: list[tuple[re.Pattern[str], _Resolver]] = [
    (re.compile(rf"{_MONTH}\s+(?:of\s+)?{_YEAR}\b"), _month_year),
    (re.compile(rf"{_YEAR}\b"), _year_only),
    (re.compile(rf"{_MONTH}(?!\w)"), _month_only),
]
_BARE_MONTH = re.compile(rf"^(?:\w+\s+)*?{_MONTH}$")  # a month said without its year or day
_DURATION = re.compile(rf"\bfor\s+(?:the\s+(?:past|last)\s+)?{_NUM}\s+{_UNIT}\b", re.IGNORECASE)


def _mention(resolve: _Resolver, m: re.Match[str], ref: date, zone: timezone) -> TimeMention | None:
    value = resolve(m, ref)
    if value is None:
        return None
    assumed = resolve in (_month_day, _month_only) or (
        resolve is _weekday and (m["which"] or "on").lower() == "on") or (
        resolve is _weekend and m["which"].lower().startswith("over"))  # ("over the weekend": past or coming)
    return TimeMention(m.start(), m.end(), m[0], _midnight(value, zone), _midnight(_period(resolve, m, value), zone),
                       assumed_past=assumed)


def _bound(text: str, t: TimeMention) -> str:
    """How the words around a mention use it: "since", "until", "through" or "at"."""
    before = text[max(0, t.start - 30):t.start]
    for bound, own, preceding in _BOUNDS:
        if own.search(t.text) or preceding.search(before):
            return bound
    return "at"


def _with_range(text: str, t: TimeMention, following: TimeMention | None, ref: date, zone: timezone
                ) -> tuple[TimeMention, bool]:
    """The mention, made a range when "from|since|between" A is joined to a B; and whether B was
    the following mention (then it is part of this one)."""
    lead = re.match(r"\s*(since|from|between)\b", t.text, re.IGNORECASE) or \
        re.search(r"\b(since|from|between)\s+$", text[max(0, t.start - 30):t.start], re.IGNORECASE)
    if lead is None:
        return t, False
    join = _RANGE_JOIN["between" if lead[1].lower() == "between" else "from"].match(text, t.end)
    if join is None:
        return t, False
    to: TimeMention | None = None
    # the following mention may hold the joining word itself ("from 2018 until 2020")
    used = following is not None and t.end <= following.start <= join.end()
    if used:
        to = following
    else:
        for pattern, resolve in _BARE_END:
            m = pattern.match(text, join.end())
            if m is not None and (to := _mention(resolve, m, ref, zone)) is not None:
                break
    if to is None:
        return t, False
    month = _BARE_MONTH.search(t.text)
    if to.value < t.value and month is not None and to.text.rstrip().endswith(str(to.value.year)):
        # "from March to May 2020": the year said once belongs to both ends
        start = date(to.value.year, _MONTHS[month["month"].lower()], 1)
        t = replace(t, value=_midnight(start, zone), until=_midnight(_add_months(start, 1), zone))
    if to.value < t.value:
        return t, False
    until = "until" in join.re.groupindex and join["until"] is not None
    to = replace(to, bound="until" if until else "through")
    return replace(t, end=to.end, text=text[t.start:to.end], bound="since", to=to), used


def find_times(text: str, reference: datetime) -> list[TimeMention]:
    """All non-overlapping time expressions in text, left to right: calendar dates on the
    reference's local date (its own UTC offset), values in UTC (local midnights).

    Where two expressions overlap the earlier, then the longer one wins, so
    "May 8, 2023" is one date rather than "May 8" plus a stray year.  Each has its bound and
    ranges are one mention (see the module docstring).
    """
    zone = zone_of(reference)
    ref = reference.astimezone(zone).date()
    mentions = _find_times(text, ref, zone)
    out: list[TimeMention] = []
    i = 0
    while i < len(mentions):
        t = replace(mentions[i], bound=_bound(text, mentions[i]))
        t, used = _with_range(text, t, mentions[i + 1] if i + 1 < len(mentions) else None, ref, zone)
        out.append(_in_utc(t))
        i += 2 if used else 1
    return out


def _find_times(text: str, ref: date, zone: timezone) -> list[TimeMention]:
    found: list[tuple[int, int, _Resolver, re.Match[str]]] = []
    for pattern, resolve in _RULES:
        for m in pattern.finditer(text):
            found.append((m.start(), -m.end(), resolve, m))
    found.sort(key=lambda item: (item[0], item[1]))
    mentions: list[TimeMention] = []
    taken_until = -1
    for start, neg_end, resolve, m in found:
        if start < taken_until:
            continue
        mention = _mention(resolve, m, ref, zone)
        if mention is None:
            continue
        mentions.append(mention)
        taken_until = -neg_end
    return mentions


def find_time(text: str, reference: datetime) -> tuple[datetime | None, str | None]:
    """The first time expression in text as (UTC datetime, matched phrase), or (None, None)."""
    mentions = find_times(text, reference)
    if not mentions:
        return None, None
    return mentions[0].value, mentions[0].text


def day_of(moment: datetime, zone: timezone = timezone.utc) -> tuple[datetime, datetime]:
    """The day of ``zone`` (a fixed offset; UTC by default) containing ``moment`` as UTC
    [local midnight, next local midnight)."""
    start = to_utc(_midnight(to_utc(moment).astimezone(zone).date(), zone))
    return start, start + timedelta(days=1)


def find_duration(text: str, reference: datetime) -> TimeMention | None:
    """A "for N years"-style duration, valued at the start of a period ending at the reference.

    Only meaningful for a state said to be ongoing ("I've lived here for 3 years"); the start
    is the local midnight of the reference's local date shifted back.
    """
    m = _DURATION.search(text)
    if m is None:
        return None
    zone = zone_of(reference)
    start = _shift(reference.astimezone(zone).date(), -_number(m["n"]), m["unit"].lower())
    return TimeMention(m.start(), m.end(), m[0], to_utc(_midnight(start, zone)))
