"""Word lists and sentence templates for the search-latency benchmark's synthetic graphs."""
from __future__ import annotations

FIRST = (
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David", "Elizabeth",
    "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Charles", "Karen",
    "Daniel", "Nancy", "Matthew", "Lisa", "Anthony", "Betty", "Mark", "Margaret", "Donald", "Sandra",
    "Steven", "Ashley", "Paul", "Kimberly", "Andrew", "Emily", "Joshua", "Donna", "Kenneth", "Michelle",
    "Kevin", "Carol", "Brian", "Amanda", "George", "Melissa", "Timothy", "Deborah", "Ronald", "Stephanie",
    "Edward", "Rebecca", "Jason", "Sharon", "Jeffrey", "Laura", "Ryan", "Cynthia", "Jacob", "Kathleen",
    "Gary", "Amy", "Nicholas", "Angela", "Eric", "Shirley", "Jonathan", "Anna", "Stephen", "Brenda",
    "Larry", "Pamela", "Justin", "Emma", "Scott", "Nicole", "Brandon", "Helen", "Benjamin", "Samantha",
    "Samuel", "Katherine", "Gregory", "Christine", "Alexander", "Debra", "Frank", "Rachel", "Patrick",
    "Carolyn", "Raymond", "Janet", "Jack", "Catherine", "Dennis", "Maria", "Jerry", "Heather", "Tyler",
    "Diane", "Aaron", "Ruth", "Jose", "Julie", "Adam", "Olivia", "Nathan", "Joyce", "Henry", "Virginia",
    "Douglas", "Victoria", "Zachary", "Kelly", "Peter", "Lauren", "Kyle", "Christina", "Ethan", "Joan",
    "Walter", "Evelyn", "Noah", "Judith", "Jeremy", "Megan", "Christian", "Andrea", "Keith", "Cheryl",
    "Roger", "Hannah", "Terry", "Jacqueline", "Gerald", "Martha", "Harold", "Gloria", "Sean", "Teresa",
    "Austin", "Ann", "Carl", "Sara", "Arthur", "Madison", "Lawrence", "Frances", "Dylan", "Kathryn",
    "Jesse", "Janice", "Jordan", "Jean", "Bryan", "Abigail", "Billy", "Alice", "Joe", "Julia", "Bruce",
    "Judy", "Gabriel", "Sophia", "Logan", "Grace", "Albert", "Denise", "Willie", "Amber", "Alan",
    "Doris", "Juan", "Marilyn", "Wayne", "Danielle", "Elijah", "Beverly", "Randy", "Isabella", "Roy",
    "Theresa", "Vincent", "Diana", "Ralph", "Natalie", "Eugene", "Brittany", "Russell", "Charlotte",
    "Bobby", "Marie", "Mason", "Kayla", "Philip", "Alexis", "Louis", "Lori", "Maya", "Omar", "Priya",
    "Tomas", "Kofi", "Hana", "Dmitri", "Elena", "Ruben", "Alma",
)
LAST = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson",
    "Martin", "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis",
    "Robinson", "Walker", "Young", "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill",
    "Flores", "Green", "Adams", "Nelson", "Baker", "Hall", "Rivera", "Campbell", "Mitchell", "Carter",
    "Roberts", "Gomez", "Phillips", "Evans", "Turner", "Diaz", "Parker", "Cruz", "Edwards", "Collins",
    "Reyes", "Stewart", "Morris", "Morales", "Murphy", "Cook", "Rogers", "Gutierrez", "Ortiz", "Morgan",
    "Cooper", "Peterson", "Bailey", "Reed", "Kelly", "Howard", "Ramos", "Kim", "Cox", "Ward",
    "Richardson", "Watson", "Brooks", "Chavez", "Wood", "James", "Bennett", "Gray", "Mendoza", "Ruiz",
    "Hughes", "Price", "Alvarez", "Castillo", "Sanders", "Patel", "Myers", "Long", "Ross", "Foster",
    "Jimenez", "Powell", "Jenkins", "Perry", "Russell", "Sullivan", "Bell", "Coleman", "Butler",
    "Henderson", "Barnes", "Gonzales", "Fisher", "Vasquez", "Simmons", "Romero", "Jordan", "Patterson",
    "Alexander", "Hamilton", "Graham", "Reynolds", "Griffin", "Wallace", "Moreno", "West", "Cole",
    "Hayes", "Bryant", "Herrera", "Gibson", "Ellis", "Tran", "Medina", "Aguilar", "Stevens", "Murray",
    "Ford", "Castro", "Marshall", "Owens", "Harrison", "Fernandez", "McDonald", "Woods", "Washington",
    "Kennedy", "Wells", "Vargas", "Henry", "Chen", "Freeman", "Webb", "Tucker", "Guzman", "Burns",
    "Crawford", "Olson", "Simpson", "Porter", "Hunter", "Gordon", "Mendez", "Silva", "Shaw", "Snyder",
    "Mason", "Dixon", "Munoz", "Hunt", "Hicks", "Holmes", "Palmer", "Wagner", "Black", "Robertson",
    "Boyd", "Rose", "Stone", "Salazar", "Fox", "Warren", "Mills", "Meyer", "Rice", "Schmidt", "Garza",
    "Daniels", "Ferguson", "Nichols", "Stephens", "Soto", "Weaver", "Ryan", "Gardner", "Payne", "Grant",
    "Dunn", "Kowalski", "Novak", "Okafor", "Tanaka", "Sato", "Larsen", "Berg",
)
COMPANY_HEAD = (
    "Northwind", "Blue Harbor", "Redwood", "Silver Lake", "Ironbark", "Copper Hill", "Lakeside",
    "Brightpath", "Stonebridge", "Evergreen", "Summit", "Harborview", "Acme", "Globex", "Initech",
    "Umbrella", "Vandelay", "Hooli", "Pied Piper", "Wayne", "Stark", "Cyberdyne", "Tyrell", "Soylent",
    "Oscorp", "Aperture", "Black Mesa", "Gringotts", "Wonka", "Dunder", "Sterling", "Prestige",
    "Monarch", "Massive Dynamic", "Nakatomi", "Zorg", "Virtucon", "Gekko", "Buy More", "Kramerica",
    "Bluth", "Wernham", "Lacuna", "Rekall", "Sirius", "Yoyodyne", "Omni", "Weyland", "Abstergo",
    "Hanso", "Dharma", "Ingen", "Biffco", "Spacely", "Cogswell", "Paper Street", "Los Pollos",
    "Bubba Gump", "Duff", "Krusty",
)
COMPANY_TAIL = (
    "Labs", "Systems", "Analytics", "Foods", "Logistics", "Health", "Media", "Robotics", "Capital",
    "Energy", "Software", "Motors", "Insurance", "Pharma", "Studios",
)
CITIES = (
    "Boston", "Denver", "Seattle", "Austin", "Chicago", "Portland", "Berlin", "Lisbon", "Tokyo", "Toronto",
    "Madrid", "Dublin", "Oslo", "Prague", "Vienna", "Zurich", "Melbourne", "Sydney", "Montreal",
    "Vancouver", "Amsterdam", "Copenhagen", "Stockholm", "Seoul", "Miami", "Atlanta", "Houston", "Dallas",
    "Milan", "Munich", "Paris", "Rome", "Venice", "Florence", "Athens", "Istanbul", "Bangkok",
    "Singapore", "Reykjavik", "Lima", "Nairobi", "Kathmandu", "Marrakesh", "Kyoto", "Mexico City",
    "Porto", "Helsinki", "Warsaw", "Budapest", "Krakow", "Edinburgh", "Glasgow", "Manchester",
    "Barcelona", "Valencia", "Seville", "Naples", "Hamburg", "Cologne", "Lyon", "Marseille", "Nice",
    "Brussels", "Antwerp", "Rotterdam", "Geneva", "Salzburg", "Bologna", "Turin", "Osaka", "Hanoi",
    "Manila", "Jakarta", "Auckland", "Wellington", "Cape Town", "Cairo", "Dubai", "Mumbai", "Delhi",
)
HOBBIES = (
    "hiking", "swimming", "painting", "chess", "cooking", "running", "yoga", "photography", "gardening",
    "knitting", "climbing", "cycling", "surfing", "baking", "fishing", "skiing", "dancing", "pottery",
    "camping", "sailing", "birdwatching", "woodworking", "tennis", "golf", "archery", "fencing",
    "kayaking", "rowing", "snowboarding", "skateboarding", "juggling", "origami", "calligraphy",
    "astronomy", "beekeeping", "brewing", "karaoke", "poetry", "sculpture", "embroidery", "volleyball",
    "basketball", "football", "cricket", "rugby", "badminton", "bowling", "boxing", "judo", "karate",
    "meditation", "pilates", "crossfit", "triathlon", "marathons", "podcasting", "blogging", "gaming",
    "puzzles", "crosswords",
)
SCHOOLS = (
    "Stanford", "Harvard", "Oxford", "Cambridge", "Yale", "Princeton", "Columbia", "Cornell", "Berkeley",
    "Caltech", "Duke", "Brown University", "Dartmouth", "Penn", "Georgetown", "McGill", "ETH Zurich",
    "Sorbonne", "Heidelberg", "Bocconi", "Waseda", "KAIST", "Tsinghua", "Melbourne University",
    "Imperial College", "Trinity College", "Rice University", "Emory", "Vanderbilt", "Tufts",
)
CLUBS = (
    "the chess club", "the rowing club", "the book club", "the choir", "the hiking society",
    "the film society", "the gardening club", "the robotics club", "the debate team", "the jazz band",
    "the running club", "the photography guild", "the climbing gym", "the sailing club",
    "the pottery studio", "the volunteer fire brigade", "the tennis club", "the cycling team",
    "the astronomy society", "the bee club", "the theatre group", "the quilting circle",
    "the swim team", "the golf club", "the supper club", "the poetry circle", "the makerspace",
    "the orchestra", "the rugby club", "the yoga collective",
)
ROLES = (
    "engineer", "designer", "manager", "analyst", "nurse", "teacher", "chef", "lawyer", "accountant",
    "researcher", "developer", "consultant", "pilot", "architect", "editor", "salesperson", "director",
    "intern", "scientist", "technician", "recruiter", "writer", "pharmacist", "mechanic", "electrician",
    "photographer", "product owner", "data scientist", "marketer", "translator",
)
FIELDS = (
    "physics", "history", "economics", "law", "medicine", "biology", "chemistry", "mathematics",
    "philosophy", "computer science", "architecture", "music", "literature", "psychology", "nursing",
    "art history", "linguistics", "geology", "statistics", "sociology",
)
PLACES = (
    "a wedding", "a conference", "university", "a concert", "the gym", "work", "a party", "the airport",
    "a hackathon", "a book fair", "the park", "a cooking class", "a museum", "a festival", "church",
)
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
SPEAKERS = ("Maya", "Omar", "Priya", "Tomas", "assistant")

# relation -> (source kind, target kind, weight, templates). {s} source, {t} target; the other
# placeholders are filled from the lists above.
RELATIONS: dict[str, tuple[str, str, float, tuple[str, ...]]] = {
    "WORKS_FOR": ("person", "company", 0.15, (
        "{s} works for {t}", "{s} works for {t} as a {role}", "{s} joined {t} as a {role} in {year}",
        "{s} has been a {role} at {t} since {year}")),
    "LIVES_IN": ("person", "city", 0.10, (
        "{s} lives in {t}", "{s} moved to {t} in {year}", "{s} rents a flat in {t}")),
    "LIKES": ("person", "hobby", 0.20, (
        "{s} likes {t}", "{s} enjoys {t} on weekends", "{s} loves {t}", "{s} took up {t} in {year}",
        "{s} goes {t} with friends every {month}")),
    "FRIENDS_WITH": ("person", "person", 0.14, (
        "{s} is friends with {t}", "{s} met {t} at {place}", "{s} and {t} have been friends since {year}")),
    "VISITED": ("person", "city", 0.12, (
        "{s} visited {t} in {month} {year}", "{s} travelled to {t} for {place}",
        "{s} spent a week in {t}")),
    "STUDIED_AT": ("person", "school", 0.06, (
        "{s} studied {field} at {t}", "{s} graduated from {t} in {year}", "{s} did a PhD in {field} at {t}")),
    "MEMBER_OF": ("person", "club", 0.08, (
        "{s} is a member of {t}", "{s} joined {t} in {year}", "{s} runs {t}")),
    "MANAGES": ("person", "person", 0.06, (
        "{s} manages {t}", "{s} is the boss of {t}", "{s} mentors {t}")),
    "MARRIED_TO": ("person", "person", 0.03, (
        "{s} is married to {t}", "{s} married {t} in {year}")),
    "LOCATED_IN": ("company", "city", 0.06, (
        "{s} is headquartered in {t}", "{s} opened an office in {t} in {year}")),
}
KIND_LABEL = {"person": "Person", "company": "Organization", "city": "Location", "hobby": "Activity",
              "school": "Organization", "club": "Organization"}

# (template, entity labels it names): text queries drawn from a group's entities ("Role" = a job word).
QUERY_TEMPLATES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("where does {0} work", ("Person",)),
    ("who works for {0}", ("Organization",)),
    ("who likes {0}", ("Activity",)),
    ("what does {0} do on weekends", ("Person",)),
    ("who lives in {0}", ("Location",)),
    ("when did {0} visit {1}", ("Person", "Location")),
    ("{0} {1}", ("Person", "Activity")),
    ("friends of {0}", ("Person",)),
    ("who is a member of {0}", ("Organization",)),
    ("{0} job as a {1}", ("Person", "Role")),
    ("which company is headquartered in {0}", ("Location",)),
)
