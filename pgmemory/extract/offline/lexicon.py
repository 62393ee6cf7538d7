"""Word lists and label tables for the offline extractor's English rules."""
from __future__ import annotations

import re

CAP_STOP = frozenset("""
i a an the this that these those there here it its he she we they you me him her us them
my your our his their what who whom when where why how which whose some any every each all
no not yes yeah yep nope oh ooh wow hey hi hello bye goodbye thanks thank please sorry so
and but or if then also just well ok okay sure great good nice cool awesome amazing
congrats congratulations love lol haha hahaha omg btw aw aww ah um uh hmm totally definitely
absolutely really actually honestly anyway anyways dear mom dad mum mommy daddy grandma
grandpa sir madam today yesterday tomorrow tonight last next happy merry best cheers welcome
let lets do does did have has had is are was were will would can could should may might
must shall be been being am monday tuesday wednesday thursday friday saturday sunday
january february march april june july august september october november december
christmas easter thanksgiving halloween morning evening afternoon night birthday luck
wishing glad exactly indeed true right wait look listen guess agreed same absolutely
speaking sounds seems hope tv remember check meet say woohoo woah whoa yay hooray yo
""".split())
CONNECTORS = frozenset(["of", "de", "del", "da", "du", "van", "von", "la", "le", "for", "&"])
TITLES = frozenset(["mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "mt", "vs", "etc", "inc",
                    "e.g", "i.e"])
NP_STOP = frozenset("""
in at on for with to from by about of into onto over under near around through during since
after before until without like as than and or but so because while when where which who
whom whose that if though although now then today yesterday tomorrow tonight last next this
ago again too very really lately recently anymore already still yet soon every each almost
originally
is are was were be been am have has had do does did will would can could should may might
must not i you he she it we they me him her us them my your his its our their there here
get got make made feel felt look looks looked seem seems seemed went go goes take took want
wants need needs think thought know knew see saw said says love loves like likes enjoy
enjoys hate hates just also even only both either much more most lot all twice once
together alone often sometimes everyday daily weekly home back ever well lol haha these
a an nowadays
""".split())
PRONOUNS = frozenset("""
it this that these those them him her you us me everything something anything nothing
everyone someone anyone one what which myself yourself himself herself ourselves themselves
there here so too how why when where who
""".split())
DETERMINERS = frozenset(["a", "an", "the", "my", "our", "this", "that", "these", "those",
                         "some", "your", "his", "her", "their", "its"])
SPECIFIC_DETS = frozenset(["this", "that", "these", "those", "your", "his", "her", "their", "its"])
ADJECTIVES = frozenset("""
new brand old little big small nice cute beautiful lovely great good amazing awesome local
huge cool wonderful fantastic gorgeous adorable sweet whole real own first second
""".split())
MEANINGLESS = frozenset("""
lot bit way thing things stuff time times one ones kind sort few couple day days week month
year moment chance idea deal fact part point reason living break while opportunity
experience feeling end rest most much more some none both other others same fun being
having doing getting going making trying
""".split())
_LIGHT_VERBS = frozenset("""
see hear know be have get do make help say think try hang chat talk catch share meet find
tell ask keep give let put
""".split())
VERB_FORMS_PAST = frozenset("""
worked taught lived resided liked loved hated enjoyed studied dated came grew was were
""".split())

PETS = {"dog": "dog", "dogs": "dog", "puppy": "dog", "pup": "dog", "cat": "cat", "cats": "cat",
        "kitten": "cat", "kitty": "cat", "hamster": "hamster", "rabbit": "rabbit",
        "bunny": "rabbit", "parrot": "parrot", "bird": "bird", "fish": "fish",
        "goldfish": "fish", "turtle": "turtle", "snake": "snake", "horse": "horse",
        "guinea pig": "guinea pig", "lizard": "lizard", "pony": "horse"}
CARS = frozenset(["car", "truck", "suv", "van", "motorcycle", "motorbike", "minivan", "jeep",
                  "convertible", "pickup"])
CAR_BRANDS = ("Tesla|Toyota|Honda|Ford|BMW|Audi|Mercedes|Volkswagen|VW|Subaru|Kia|Hyundai"
              "|Chevy|Chevrolet|Nissan|Mazda|Jeep|Volvo|Porsche|Lexus|Prius|Mini|Fiat|Ferrari")
KIN = {  # role word -> (relation, functional, label)
    "wife": ("MARRIED_TO", True, "Person"), "husband": ("MARRIED_TO", True, "Person"),
    "spouse": ("MARRIED_TO", True, "Person"), "partner": ("DATING", False, "Person"),
    "girlfriend": ("DATING", False, "Person"), "boyfriend": ("DATING", False, "Person"),
    "fiance": ("DATING", False, "Person"), "fiancee": ("DATING", False, "Person"),
    "son": ("HAS_CHILD", False, "Person"), "daughter": ("HAS_CHILD", False, "Person"),
    "kid": ("HAS_CHILD", False, "Person"), "child": ("HAS_CHILD", False, "Person"),
    "kids": ("HAS_CHILD", False, "Person"), "children": ("HAS_CHILD", False, "Person"),
    "sons": ("HAS_CHILD", False, "Person"), "daughters": ("HAS_CHILD", False, "Person"),
    "baby": ("HAS_CHILD", False, "Person"), "twins": ("HAS_CHILD", False, "Person"),
    "mother": ("HAS_MOTHER", False, "Person"), "mom": ("HAS_MOTHER", False, "Person"),
    "mum": ("HAS_MOTHER", False, "Person"), "father": ("HAS_FATHER", False, "Person"),
    "dad": ("HAS_FATHER", False, "Person"), "sister": ("HAS_SISTER", False, "Person"),
    "brother": ("HAS_BROTHER", False, "Person"), "sibling": ("HAS_SIBLING", False, "Person"),
    "cousin": ("HAS_COUSIN", False, "Person"), "aunt": ("HAS_AUNT", False, "Person"),
    "uncle": ("HAS_UNCLE", False, "Person"), "niece": ("HAS_NIECE", False, "Person"),
    "nephew": ("HAS_NEPHEW", False, "Person"), "grandmother": ("HAS_GRANDMOTHER", False, "Person"),
    "grandma": ("HAS_GRANDMOTHER", False, "Person"),
    "grandfather": ("HAS_GRANDFATHER", False, "Person"),
    "grandpa": ("HAS_GRANDFATHER", False, "Person"), "friend": ("HAS_FRIEND", False, "Person"),
    "best friend": ("HAS_FRIEND", False, "Person"), "boss": ("HAS_BOSS", False, "Person"),
    "manager": ("HAS_BOSS", False, "Person"), "coworker": ("HAS_COWORKER", False, "Person"),
    "co-worker": ("HAS_COWORKER", False, "Person"), "colleague": ("HAS_COWORKER", False, "Person"),
    "roommate": ("HAS_ROOMMATE", False, "Person"), "neighbor": ("HAS_NEIGHBOR", False, "Person"),
    "neighbour": ("HAS_NEIGHBOR", False, "Person"), "mentor": ("HAS_MENTOR", False, "Person"),
    **{pet: ("HAS_PET", False, "Pet") for pet in PETS},
}
KIN_ALT = "|".join(sorted((re.escape(k) for k in KIN), key=len, reverse=True))
JOB_WORDS = ("engineer|developer|programmer|manager|designer|teacher|nurse|doctor|lawyer|"
             "scientist|researcher|analyst|consultant|intern|director|ceo|cto|cfo|founder|"
             "co-founder|cofounder|professor|chef|cook|accountant|architect|writer|editor|"
             "barista|cashier|volunteer|officer|assistant|lead|vp|president|specialist|"
             "technician|counselor|counsellor|therapist|pharmacist|mechanic|electrician|driver|"
             "pilot|librarian|receptionist|clerk|coordinator|administrator|employee|worker|"
             "surgeon|dentist|paramedic|firefighter|instructor|coach|tutor|partner|associate|"
             "executive|owner|waiter|waitress|bartender|server|janitor|secretary|agent|"
             "student|freshman|sophomore|junior|senior|undergrad|undergraduate|postdoc|"
             "fellow|candidate")
JOB_NOUNS = frozenset(["job", "position", "role", "gig", "internship", "jobs"])
SCHOOL_WORDS = frozenset(["university", "college", "school", "institute", "academy", "polytechnic",
                          "conservatory", "seminary"])
PLURAL_ROLES = frozenset(["kids", "children", "sons", "daughters", "twins"])
STUDENT_WORDS = frozenset(["student", "freshman", "sophomore", "junior", "senior", "undergrad",
                           "undergraduate", "postdoc", "fellow", "candidate"])
GROUP_WORDS = frozenset(["club", "group", "team", "community", "society", "league", "choir",
                         "band", "gym", "class", "association", "circle", "guild", "union"])
PLACES = frozenset(x.lower() for x in """
Afghanistan|Argentina|Australia|Austria|Belgium|Brazil|Canada|Chile|China|Colombia|Croatia|
Cuba|Czechia|Denmark|Egypt|England|Ethiopia|Finland|France|Germany|Ghana|Greece|Hungary|
Iceland|India|Indonesia|Iran|Iraq|Ireland|Israel|Italy|Jamaica|Japan|Kenya|Korea|Lebanon|
Mexico|Morocco|Nepal|Netherlands|New Zealand|Nigeria|Norway|Pakistan|Peru|Philippines|
Poland|Portugal|Romania|Russia|Scotland|Singapore|South Africa|South Korea|Spain|Sweden|
Switzerland|Taiwan|Thailand|Turkey|Ukraine|United Kingdom|UK|United States|USA|US|America|
Vietnam|Wales|Amsterdam|Athens|Atlanta|Austin|Bangkok|Barcelona|Beijing|Berlin|Boston|
Brooklyn|Budapest|Buenos Aires|Cairo|Chicago|Copenhagen|Dallas|Delhi|Denver|Dubai|Dublin|
Edinburgh|Florence|Hong Kong|Houston|Istanbul|Jakarta|Lagos|Las Vegas|Lisbon|London|
Los Angeles|LA|Madrid|Manchester|Melbourne|Miami|Milan|Montreal|Moscow|Mumbai|Munich|
Nairobi|New York|New York City|NYC|Oslo|Paris|Philadelphia|Portland|Prague|Rio|Rome|
San Diego|San Francisco|Seattle|Seoul|Shanghai|Shenzhen|Stockholm|Sydney|Tokyo|Toronto|
Vancouver|Venice|Vienna|Warsaw|Washington|Zurich|California|Texas|Florida|Oregon|Hawaii|
Alaska|Colorado|Arizona|Nevada|Ohio|Michigan|Georgia|Virginia|Massachusetts|Europe|Asia|
Africa
""".replace("\n", "").split("|"))
AUX = frozenset("""
am is are was were be been being have has had do does did not never no longer now currently
also still just recently finally really actually officially already both too always usually
often sometimes truly totally absolutely definitely honestly basically mostly even only all
ever again happily proudly newly originally used to
""".split())
NOT_VERBS = NP_STOP - AUX
LEAD_IN_LABELS = frozenset("""
news update updates fact note reminder question fyi ps edit psa tldr warning spoiler alert up
talk story summary answer confession hint tip lol ok okay so well also btw anyway re fwd fw
subject to from cc date time title status todo agenda notes important
""".split())
NOT_ACTIVITIES = _LIGHT_VERBS | NP_STOP


def label_for_place(name: str) -> str | None:
    return "Place" if name.lower() in PLACES else None
