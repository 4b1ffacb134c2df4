"""Seed data for the ``reddit`` sandbox site (a Postmill-like forum, as in WebArena).

``build(db_path, seed)`` writes a SQLite file with users, forums, posts, comments and subscriptions, generated
deterministically from ``seed`` (same seed, same bytes of content). Dates are fixed offsets from
:data:`EPOCH`, never the wall clock, so "the latest post" is a property of the seed.
"""

from __future__ import annotations

import random
import re
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

from webrl.sandbox.auth import DEFAULT_ACCOUNTS, hash_password

EPOCH = datetime(2023, 3, 1, 12, 0, 0)  # seed timestamps lie in the 400 days before this
SEED_DAYS = 400
DEFAULT_USER, DEFAULT_PASSWORD = DEFAULT_ACCOUNTS["reddit"]  # the account tasks log in as
N_USERS = 140
POSTS_PER_FORUM = (18, 30)  # min, max posts per forum
COMMENTS_PER_POST = (0, 9)

SCHEMA = """
CREATE TABLE users (
    id INTEGER PRIMARY KEY, username TEXT NOT NULL UNIQUE, password_sha256 TEXT NOT NULL,
    bio TEXT NOT NULL DEFAULT '', joined TEXT NOT NULL
);
CREATE TABLE forums (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, title TEXT NOT NULL, description TEXT NOT NULL,
    created TEXT NOT NULL, creator_id INTEGER NOT NULL REFERENCES users(id)
);
CREATE TABLE posts (
    id INTEGER PRIMARY KEY, forum_id INTEGER NOT NULL REFERENCES forums(id),
    user_id INTEGER NOT NULL REFERENCES users(id), title TEXT NOT NULL, url TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL DEFAULT '', created TEXT NOT NULL, upvotes INTEGER NOT NULL DEFAULT 1,
    downvotes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX posts_forum ON posts(forum_id, created);
CREATE INDEX posts_user ON posts(user_id, created);
CREATE TABLE comments (
    id INTEGER PRIMARY KEY, post_id INTEGER NOT NULL REFERENCES posts(id),
    user_id INTEGER NOT NULL REFERENCES users(id), parent_id INTEGER REFERENCES comments(id),
    body TEXT NOT NULL, created TEXT NOT NULL, upvotes INTEGER NOT NULL DEFAULT 1,
    downvotes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX comments_post ON comments(post_id, created);
CREATE INDEX comments_user ON comments(user_id, created);
CREATE TABLE votes (
    user_id INTEGER NOT NULL REFERENCES users(id), kind TEXT NOT NULL CHECK (kind IN ('post', 'comment')),
    target_id INTEGER NOT NULL, choice INTEGER NOT NULL CHECK (choice IN (-1, 1)),
    PRIMARY KEY (user_id, kind, target_id)
);
CREATE TABLE subscriptions (
    user_id INTEGER NOT NULL REFERENCES users(id), forum_id INTEGER NOT NULL REFERENCES forums(id),
    PRIMARY KEY (user_id, forum_id)
);
"""

# Forums: name -> (title, description, post title templates). "{x}" slots draw from FILLERS[x].
FORUMS: dict[str, tuple[str, str, list[str]]] = {
    "books": ("Books", "Discussion of books, authors and reading.", [
        "Just finished {book} and I can't stop thinking about it",
        "What is your favorite {genre} novel of all time?",
        "Is {book} worth reading in {year}?",
        "My local library is closing and I feel {feeling}",
        "Recommendations for someone who loved {book}?",
        "Reading challenge update: {n} books so far this year",
        "Unpopular opinion: {book} is overrated",
        "Best {genre} books for a long flight?",
        "Adults reading to each other out loud",
        "Audiobooks or paper books for {genre}?",
    ]),
    "Showerthoughts": ("Showerthoughts", "Miniature epiphanies that highlight the oddities of life.", [
        "The {thing} is just a {thing2} that gave up",
        "Nobody has ever seen a baby {animal} and that is {feeling}",
        "Every {thing} you own was once a brand new {thing}",
        "We never see the back of our own {body}",
        "Somewhere there is a {animal} living its best life right now",
        "In {n} years today will be the good old days",
        "Your {body} is the only one you will ever own",
        "A {thing} is a {thing2} with better marketing",
    ]),
    "worldnews": ("World News", "Major news from around the world.", [
        "{country} announces new plan to cut emissions by {n} percent",
        "Heavy floods hit northern {country}",
        "{country} and {country2} sign trade agreement",
        "Scientists in {country} report record {season} temperatures",
        "{country} elects new parliament after close vote",
        "Protests continue in the capital of {country}",
        "{country} to build {n} new high speed rail lines",
    ]),
    "movies": ("Movies", "News and discussion about films.", [
        "Rewatched {movie} last night and it still holds up",
        "Which {genre2} movie surprised you the most?",
        "Official discussion: {movie}",
        "The soundtrack of {movie} is {feeling}",
        "Underrated {genre2} films from the {decade}",
        "Is {movie} the best movie of the {decade}?",
        "Just watched {movie} for the first time",
    ]),
    "gaming": ("Gaming", "A place for gamers to talk about video games.", [
        "Finally beat {game} after {n} hours",
        "Is {game} worth buying on sale?",
        "What game got you through a {feeling} year?",
        "{game} speedrun world record broken again",
        "Looking for co-op games like {game}",
        "The level design in {game} is {feeling}",
    ]),
    "technology": ("Technology", "News and discussion about technology.", [
        "{company} unveils a new {gadget}",
        "Why is every {gadget} getting more expensive?",
        "{company} fined over data privacy rules in {country}",
        "The best {gadget} for students in {year}",
        "{company} is laying off {n} employees",
        "How long should a {gadget} last?",
    ]),
    "science": ("Science", "Peer reviewed research and science news.", [
        "New study links {habit} to better sleep",
        "Astronomers find {n} new moons around Saturn",
        "Researchers in {country} grow {plant} in simulated Mars soil",
        "A {animal} species thought extinct was found in {country}",
        "Why does {habit} improve memory? A new study",
        "Ocean temperatures reached a record high in {season}",
    ]),
    "history": ("History", "Discussions about history.", [
        "What did people in the {decade2} eat for breakfast?",
        "The forgotten history of the {thing} in {country}",
        "How did {country} fund its railways in the {decade2}?",
        "Photos of {city} from the {decade2}",
        "Why did the {empire} Empire collapse?",
    ]),
    "Music": ("Music", "The musical community of reddit.", [
        "{band} announced a reunion tour",
        "What album got you into {genre3}?",
        "{band} - live in {city} was incredible",
        "Underrated {genre3} albums from the {decade}",
        "Learning guitar at {n}, any tips?",
    ]),
    "food": ("Food", "Cooking, recipes and food photos.", [
        "Homemade {dish} from scratch",
        "My grandmother's {dish} recipe",
        "First attempt at {dish}, how did I do?",
        "What is the secret to a perfect {dish}?",
        "Made {dish} for {n} people this weekend",
    ]),
    "sports": ("Sports", "Sports news and highlights.", [
        "{team} win the championship after {n} years",
        "Who is the greatest {sport} player of the {decade}?",
        "{team} sign a new coach",
        "Highlights from the {team} game last night",
        "Is {sport} getting more popular in {country}?",
    ]),
    "DIY": ("DIY", "Do it yourself projects and home improvement.", [
        "Built a {furniture} out of old pallets",
        "How do I fix a squeaky {furniture}?",
        "Renovated our {room} for under {n} dollars",
        "First time tiling a {room}, any advice?",
        "Restored my grandfather's {furniture}",
    ]),
    "travel": ("Travel", "Travel stories, tips and photos.", [
        "Two weeks in {country} on a budget",
        "Is {city} worth visiting in {season}?",
        "Best day trips from {city}?",
        "Solo trip to {country}: what I learned",
        "Travel insurance horror story from {city}",
    ]),
    "photography": ("Photography", "Photos, gear and technique.", [
        "Sunset over {city} shot on a {camera}",
        "Is the {camera} still good in {year}?",
        "My first {season} landscape shots",
        "Street photography in {city}",
        "How do you edit {season} photos?",
    ]),
    "programming": ("Programming", "Computer programming news and discussion.", [
        "Why I moved our backend from {lang} to {lang2}",
        "{lang} {n}.0 released",
        "Learning {lang} as a second language",
        "How do you test code that talks to a {thing3}?",
        "Is {lang} still worth learning in {year}?",
        "A gentle introduction to {topic}",
    ]),
    "Worcester": ("Worcester", "Worcester, Massachusetts.", [
        "Best {dish} in Worcester?",
        "Road work on Main Street again",
        "Moving to Worcester in {season}, which neighborhood?",
        "Lost {animal} near Elm Park",
        "Worcester farmers market opens this {season}",
    ]),
}

FILLERS: dict[str, list[str]] = {
    "book": ["Dune", "The Hobbit", "Middlemarch", "Project Hail Mary", "The Road", "Circe", "Beloved",
             "The Name of the Wind", "Pachinko", "Piranesi", "Jane Eyre", "Anna Karenina", "The Martian",
             "Educated", "Hyperion", "Rebecca", "Frankenstein", "Moby Dick"],
    "genre": ["fantasy", "science fiction", "mystery", "historical", "horror", "romance", "nonfiction"],
    "genre2": ["horror", "comedy", "animated", "science fiction", "western", "thriller", "war"],
    "genre3": ["jazz", "punk", "metal", "folk", "hip hop", "classical", "indie rock"],
    "year": ["2021", "2022", "2023"],
    "feeling": ["heartbroken", "amazing", "weird", "underrated", "beautiful", "exhausting", "hilarious"],
    "n": ["3", "5", "12", "20", "40", "52", "100", "250"],
    "thing": ["sandwich", "pencil", "couch", "library", "umbrella", "mirror", "calendar", "staircase"],
    "thing2": ["taco", "crayon", "bed", "bookshelf", "parachute", "window", "clock", "ladder"],
    "thing3": ["database", "message queue", "payment API", "browser", "GPU"],
    "animal": ["pigeon", "owl", "frog", "raccoon", "otter", "beetle", "crow", "turtle"],
    "body": ["face", "spine", "ears", "elbows"],
    "country": ["Canada", "Japan", "Kenya", "Brazil", "Norway", "India", "Chile", "Portugal", "Vietnam", "Ghana"],
    "country2": ["Mexico", "Australia", "Germany", "Peru", "Egypt", "Finland"],
    "season": ["spring", "summer", "autumn", "winter"],
    "movie": ["Alien", "Heat", "Arrival", "Casablanca", "Spirited Away", "Jaws", "Parasite", "Amadeus",
              "The Thing", "Up", "Rocky", "Memento"],
    "decade": ["80s", "90s", "2000s", "2010s"],
    "decade2": ["1850s", "1920s", "1930s", "1960s", "1880s"],
    "game": ["Hollow Knight", "Stardew Valley", "Celeste", "Hades", "Portal 2", "Outer Wilds", "Factorio",
             "Civilization VI", "Elden Ring", "Terraria"],
    "company": ["Apple", "Samsung", "Google", "Microsoft", "Sony", "Nokia", "Intel", "Lenovo"],
    "gadget": ["smartphone", "laptop", "smartwatch", "e-reader", "tablet", "headset", "router"],
    "habit": ["walking", "reading", "napping", "gardening", "meditation", "cold showers"],
    "plant": ["potatoes", "tomatoes", "lettuce", "beans"],
    "city": ["Lisbon", "Kyoto", "Boston", "Oslo", "Nairobi", "Lima", "Hanoi", "Prague", "Montreal", "Seville"],
    "empire": ["Roman", "Ottoman", "Mughal", "Byzantine", "Inca"],
    "band": ["Radiohead", "The Cure", "Daft Punk", "Fleetwood Mac", "Arcade Fire", "Pixies", "Blur"],
    "dish": ["lasagna", "ramen", "sourdough bread", "pho", "tacos", "paella", "apple pie", "dumplings"],
    "team": ["Boston Red Sox", "Chicago Bulls", "Green Bay Packers", "Toronto Raptors", "Seattle Sounders"],
    "sport": ["baseball", "basketball", "hockey", "soccer", "tennis"],
    "furniture": ["bookshelf", "coffee table", "workbench", "bed frame", "rocking chair", "dresser"],
    "room": ["bathroom", "kitchen", "basement", "garage"],
    "camera": ["Fujifilm X100V", "Canon AE-1", "Nikon D750", "Sony A7 III", "Pentax K1000"],
    "lang": ["Python", "Rust", "Go", "Java", "Ruby", "Elixir", "TypeScript", "Kotlin"],
    "lang2": ["Rust", "Go", "Python", "Kotlin", "Elixir", "C#"],
    "topic": ["hash tables", "garbage collection", "regular expressions", "type inference", "B-trees"],
}

BODY_SENTENCES = [
    "I have been thinking about this for a while and wanted to hear what everyone thinks.",
    "Curious whether anyone else has had the same experience.",
    "Sorry if this has been asked before, the search did not turn up much.",
    "Edit: thanks for all the replies, I did not expect this many.",
    "Any advice is welcome.",
    "Long time lurker, first post here.",
    "Pictures in the comments if anyone is interested.",
    "I would love to hear your recommendations.",
    "It took me way longer than I expected.",
    "Happy to answer questions.",
]
COMMENTS = [
    "This is exactly what I needed to read today.",
    "Great post, thanks for sharing!",
    "I disagree, but I see where you are coming from.",
    "Source?",
    "Came here to say this.",
    "I had the same experience last year.",
    "This deserves more upvotes.",
    "Can confirm, it is worth it.",
    "Not sure about that, to be honest.",
    "Saving this for later.",
    "Underrated comment.",
    "What a time to be alive.",
    "Thanks, I will give it a try.",
    "My grandfather used to say the same thing.",
    "This made my day.",
    "Interesting take, I never thought of it that way.",
    "Does anyone have a link to the original?",
    "Couldn't agree more.",
    "Respectfully, no.",
    "Same here, especially the second part.",
]
BIOS = [
    "Just here for the comments.", "Coffee, books and bad puns.", "Amateur photographer.",
    "Software engineer by day, gamer by night.", "Dog person.", "I like long walks and short meetings.",
    "Lurker since 2015.", "Trying to read 52 books a year.", "", "", "",
]
NAME_A = ["Quiet", "Lazy", "Tiny", "Brave", "Salty", "Cosmic", "Rusty", "Happy", "Sleepy", "Silver", "Wild",
          "Golden", "Lucky", "Crimson", "Frosty", "Grumpy", "Mellow", "Spicy", "Witty", "Jolly"]
NAME_B = ["Otter", "Falcon", "Reader", "Wizard", "Pancake", "Badger", "Walrus", "Nomad", "Pilot", "Goblin",
          "Koala", "Panda", "Turtle", "Raven", "Muffin", "Cactus", "Pickle", "Viking", "Tiger", "Lemur"]
FIRST = ["alex", "sam", "jordan", "maria", "li", "ana", "omar", "nina", "kai", "ivan", "sara", "tom", "mei",
         "ravi", "lucy", "jack", "emma", "noah", "zoe", "leo"]
LAST = ["smith", "garcia", "chen", "kim", "patel", "nguyen", "silva", "brown", "rossi", "novak", "khan", "lee"]
FIXED_USERS = [DEFAULT_USER, "Sorkill", "jaw_mechanic", "BookWormJen", "ziggy_stardust_77", "PlantDad42"]


def slugify(title: str) -> str:
    """Postmill-style URL slug: lowercase words joined by hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:80] or "post"



def _usernames(rng: random.Random) -> list[str]:
    names: list[str] = list(FIXED_USERS)
    while len(names) < N_USERS:
        style = rng.randrange(4)
        if style == 0:
            name = f"{rng.choice(NAME_A)}{rng.choice(NAME_B)}{rng.randrange(10, 1000)}"
        elif style == 1:
            name = f"{rng.choice(NAME_A).lower()}_{rng.choice(NAME_B).lower()}"
        elif style == 2:
            name = f"{rng.choice(FIRST)}{rng.choice(LAST)}{rng.randrange(70, 100)}"
        else:
            name = f"{rng.choice(NAME_B)}{rng.choice(['Fan', 'Lover', 'Guy', 'Girl', 'Hunter', 'Master'])}"
        if name not in names:
            names.append(name)
    return names


def _fill(template: str, rng: random.Random) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: rng.choice(FILLERS[m.group(1)]), template)


def _when(rng: random.Random, after: datetime | None = None) -> datetime:
    if after is None:
        return EPOCH - timedelta(days=rng.uniform(0, SEED_DAYS))
    span = max((EPOCH - after).total_seconds(), 60.0)
    return after + timedelta(seconds=rng.uniform(30, min(span, 7 * 86400)))


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S")


def _insert_users(conn: sqlite3.Connection, rng: random.Random) -> int:
    names = _usernames(rng)
    for i, name in enumerate(names, start=1):
        joined = EPOCH - timedelta(days=SEED_DAYS + rng.uniform(10, 2000))
        bio = rng.choice(BIOS) if i > 1 else ""
        conn.execute("INSERT INTO users VALUES (?, ?, ?, ?, ?)",
                     (i, name, hash_password(DEFAULT_PASSWORD), bio, _stamp(joined)))
    return len(names)


def _insert_post(conn: sqlite3.Connection, rng: random.Random, forum_id: int, title: str, n_users: int) -> None:
    created = _when(rng)
    body = " ".join(rng.sample(BODY_SENTENCES, rng.randrange(0, 4)))
    upvotes = int(rng.paretovariate(1.3) * 3)  # heavy tailed, like real vote counts
    downvotes = rng.randrange(0, 1 + upvotes // 3)
    cur = conn.execute(
        "INSERT INTO posts (forum_id, user_id, title, body, created, upvotes, downvotes) VALUES (?,?,?,?,?,?,?)",
        (forum_id, rng.randrange(1, n_users + 1), title, body, _stamp(created), upvotes, downvotes),
    )
    post_id = int(cur.lastrowid or 0)
    comment_ids: list[int] = []
    for _ in range(rng.randrange(*COMMENTS_PER_POST)):
        parent = rng.choice(comment_ids) if comment_ids and rng.random() < 0.3 else None
        ccur = conn.execute(
            "INSERT INTO comments (post_id, user_id, parent_id, body, created, upvotes, downvotes) "
            "VALUES (?,?,?,?,?,?,?)",
            (post_id, rng.randrange(2, n_users + 1), parent, rng.choice(COMMENTS), _stamp(_when(rng, created)),
             rng.randrange(0, 30), rng.randrange(0, 6)),
        )
        comment_ids.append(int(ccur.lastrowid or 0))


def _insert_forums(conn: sqlite3.Connection, rng: random.Random, n_users: int) -> None:
    for forum_id, (name, (title, description, templates)) in enumerate(FORUMS.items(), start=1):
        created = EPOCH - timedelta(days=SEED_DAYS + rng.uniform(0, 900))
        conn.execute("INSERT INTO forums VALUES (?, ?, ?, ?, ?, ?)",
                     (forum_id, name, title, description, _stamp(created), rng.randrange(2, n_users + 1)))
        titles: list[str] = []
        want = rng.randrange(*POSTS_PER_FORUM)
        for _ in range(want * 20):  # bounded retries: templates with few slots run out of new titles
            if len(titles) >= want:
                break
            candidate = _fill(rng.choice(templates), rng)
            if candidate not in titles:
                titles.append(candidate)
        for title in titles:
            _insert_post(conn, rng, forum_id, title, n_users)
        for user_id in rng.sample(range(2, n_users + 1), rng.randrange(5, 40)):
            conn.execute("INSERT INTO subscriptions VALUES (?, ?)", (user_id, forum_id))


def build(db_path: Path, seed: int) -> None:
    """Write the reddit template database at ``db_path`` (replaced if present), deterministic in ``seed``."""
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    if db_path.exists():
        db_path.unlink()
    rng = random.Random(f"reddit-{seed}")
    conn = sqlite3.connect(db_path)
    try:
        conn.executescript(SCHEMA)
        n_users = _insert_users(conn, rng)
        _insert_forums(conn, rng, n_users)
        # The default account subscribes to a few forums, so its front page has content.
        for forum_id in (1, 3, 15):
            conn.execute("INSERT OR IGNORE INTO subscriptions VALUES (1, ?)", (forum_id,))
        conn.commit()
    finally:
        conn.close()
