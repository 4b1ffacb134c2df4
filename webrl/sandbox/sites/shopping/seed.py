"""The ``shop`` database shared by ``shopping`` (the storefront) and ``shopping_admin`` (its back office),
generated deterministically from a seed.

About 400 products in 18 leaf categories under 6 departments, each with reviews (the product's rating is
the mean of its reviews), 60 customers, ~300 orders over 2022-2023, the default customer's cart and wish
list, and the admin account. Same seed, same bytes of data.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import date, timedelta
from pathlib import Path

from webrl.sandbox.auth import DEFAULT_ACCOUNTS, hash_password

SCHEMA = """
CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, slug TEXT NOT NULL UNIQUE,
    parent_id INTEGER REFERENCES categories(id));
CREATE TABLE products (id INTEGER PRIMARY KEY, sku TEXT NOT NULL UNIQUE, name TEXT NOT NULL UNIQUE,
    category_id INTEGER NOT NULL REFERENCES categories(id), brand TEXT NOT NULL, color TEXT NOT NULL,
    price REAL NOT NULL, rating REAL NOT NULL, review_count INTEGER NOT NULL, stock INTEGER NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1, description TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE reviews (id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL REFERENCES products(id),
    author TEXT NOT NULL, rating INTEGER NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE customers (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE, first_name TEXT NOT NULL,
    last_name TEXT NOT NULL, password_hash TEXT NOT NULL, phone TEXT NOT NULL, street TEXT NOT NULL,
    city TEXT NOT NULL, state TEXT NOT NULL, zip TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, number TEXT NOT NULL UNIQUE,
    customer_id INTEGER NOT NULL REFERENCES customers(id), status TEXT NOT NULL, created TEXT NOT NULL,
    subtotal REAL NOT NULL, shipping REAL NOT NULL, total REAL NOT NULL, shipping_method TEXT NOT NULL,
    ship_name TEXT NOT NULL, ship_street TEXT NOT NULL, ship_city TEXT NOT NULL, ship_state TEXT NOT NULL,
    ship_zip TEXT NOT NULL);
CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL REFERENCES orders(id),
    product_id INTEGER NOT NULL REFERENCES products(id), name TEXT NOT NULL, sku TEXT NOT NULL,
    price REAL NOT NULL, qty INTEGER NOT NULL);
CREATE TABLE order_comments (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL REFERENCES orders(id),
    body TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE cart_items (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, product_id INTEGER NOT NULL
    REFERENCES products(id), qty INTEGER NOT NULL, UNIQUE (owner, product_id));
CREATE TABLE wishlist (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
    product_id INTEGER NOT NULL REFERENCES products(id), UNIQUE (customer_id, product_id));
CREATE TABLE admin_users (username TEXT PRIMARY KEY, password_hash TEXT NOT NULL, name TEXT NOT NULL);
CREATE INDEX ix_products_category ON products(category_id);
CREATE INDEX ix_reviews_product ON reviews(product_id);
CREATE INDEX ix_orders_customer ON orders(customer_id);
CREATE INDEX ix_items_order ON order_items(order_id);
"""

#: department -> {leaf category: product nouns}
CATALOG: dict[str, dict[str, list[str]]] = {
    "Electronics": {
        "Headphones": ["Wireless Earbuds", "Over-Ear Headphones", "Noise Cancelling Headphones", "Sport Earphones"],
        "Speakers": ["Bluetooth Speaker", "Smart Speaker", "Soundbar", "Portable Speaker"],
        "Chargers & Cables": ["USB-C Charger", "Charging Cable", "Power Bank", "Wireless Charging Pad"],
    },
    "Home & Kitchen": {
        "Cookware": ["Frying Pan", "Saucepan", "Dutch Oven", "Stock Pot"],
        "Bedding": ["Duvet Cover Set", "Memory Foam Pillow", "Fitted Sheet", "Throw Blanket"],
        "Storage & Organization": ["Storage Bin", "Shoe Rack", "Drawer Organizer", "Laundry Basket"],
    },
    "Beauty & Personal Care": {
        "Skin Care": ["Face Moisturizer", "Vitamin C Serum", "Sunscreen SPF 50", "Cleansing Gel"],
        "Hair Care": ["Shampoo", "Conditioner", "Hair Oil", "Hair Dryer"],
        "Fragrance": ["Eau de Parfum", "Body Mist", "Cologne", "Scented Lotion"],
    },
    "Sports & Outdoors": {
        "Camping": ["Camping Tent", "Sleeping Bag", "Camping Lantern", "Folding Chair"],
        "Fitness": ["Yoga Mat", "Resistance Bands", "Dumbbell Set", "Jump Rope"],
        "Cycling": ["Bike Helmet", "Bike Lock", "Cycling Gloves", "Bike Light"],
    },
    "Grocery & Gourmet Food": {
        "Coffee & Tea": ["Ground Coffee", "Green Tea", "Espresso Beans", "Herbal Tea"],
        "Snacks": ["Trail Mix", "Protein Bar", "Dark Chocolate", "Potato Chips"],
        "Pantry Staples": ["Olive Oil", "Pasta", "Maple Syrup", "Sea Salt"],
    },
    "Office Products": {
        "Writing Supplies": ["Gel Pens", "Notebook", "Highlighters", "Fountain Pen"],
        "Desk Accessories": ["Desk Organizer", "Monitor Stand", "Desk Lamp", "Mouse Pad"],
        "Paper": ["Printer Paper", "Sticky Notes", "Index Cards", "Envelopes"],
    },
}
BRANDS: dict[str, list[str]] = {
    "Electronics": ["Sonex", "Ampli", "Voltra", "Kestrel", "Zentek"],
    "Home & Kitchen": ["Hearthly", "Casa Verde", "Oakmont", "Linenly", "Nestwell"],
    "Beauty & Personal Care": ["Lumiere", "Aveline", "Purely", "Solace", "Bloomra"],
    "Sports & Outdoors": ["Trailpeak", "Ironside", "Summit Gear", "Velo", "Pacer"],
    "Grocery & Gourmet Food": ["Harvest Lane", "Bramble", "Old Mill", "Sunvale", "Copper Kettle"],
    "Office Products": ["Inkwell", "Deskmate", "Papyra", "Linea", "Officio"],
}
ADJECTIVES = ["Premium", "Classic", "Ultra", "Compact", "Deluxe", "Eco", "Pro", "Essential", "Everyday", "Signature"]
COLORS = ["Black", "White", "Blue", "Red", "Gray", "Green", "Navy", "Beige"]
PRICE_RANGE: dict[str, tuple[float, float]] = {
    "Electronics": (9.0, 249.0), "Home & Kitchen": (12.0, 180.0), "Beauty & Personal Care": (6.0, 95.0),
    "Sports & Outdoors": (8.0, 320.0), "Grocery & Gourmet Food": (3.0, 40.0), "Office Products": (2.5, 90.0),
}
FIRST_NAMES = ["Emma", "Liam", "Olivia", "Noah", "Ava", "James", "Sophia", "Lucas", "Mia", "Ethan", "Isabella",
               "Mason", "Amelia", "Logan", "Harper", "Elijah", "Evelyn", "Aiden", "Abigail", "Jacob", "Grace",
               "Daniel", "Chloe", "Henry", "Zoe", "Samuel", "Nora", "David", "Lily", "Owen", "Hannah", "Julian"]
LAST_NAMES = ["Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez",
              "Martinez", "Hernandez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Martin",
              "Lee", "Thompson", "White", "Harris", "Clark", "Lewis", "Walker", "Young", "Allen", "King",
              "Wright", "Scott", "Green", "Baker", "Adams", "Nelson", "Hill", "Campbell", "Mitchell", "Roberts"]
CITIES = [("Seattle", "WA", "981"), ("Austin", "TX", "787"), ("Denver", "CO", "802"), ("Boston", "MA", "021"),
          ("Portland", "OR", "972"), ("Chicago", "IL", "606"), ("Phoenix", "AZ", "850"), ("Atlanta", "GA", "303"),
          ("Miami", "FL", "331"), ("San Diego", "CA", "921"), ("Columbus", "OH", "432"), ("Nashville", "TN", "372")]
STREETS = ["Maple Ave", "Oak Street", "Pine Road", "Cedar Lane", "Elm Street", "Lakeview Drive", "Hillcrest Blvd",
           "Sunset Way", "River Road", "Park Place"]
REVIEW_TITLES = {
    5: ["Love it!", "Excellent quality", "Exceeded my expectations", "Perfect", "Highly recommend"],
    4: ["Very good", "Great value", "Works well", "Happy with it", "Solid purchase"],
    3: ["It's okay", "Average", "Does the job", "Mixed feelings", "Decent for the price"],
    2: ["Disappointed", "Not great", "Below expectations", "Could be better", "Meh"],
    1: ["Terrible", "Broke quickly", "Waste of money", "Do not buy", "Very poor"],
}
REVIEW_BODIES = {
    5: "I use it every day and it has been fantastic. Would buy again.",
    4: "Good product overall, with a couple of small things I would change.",
    3: "It works, but nothing special. Fine if you find it on sale.",
    2: "Quality is lower than I hoped and it arrived later than promised.",
    1: "Stopped working after a week. Customer service was no help.",
}
#: Order statuses as Magento labels them; weights of each in the generated history.
ORDER_STATUSES = {"Pending": 0.12, "Processing": 0.15, "Complete": 0.55, "Canceled": 0.12, "On Hold": 0.06}
SHIPPING_METHODS = {"Flat Rate": 5.0, "Express": 15.0, "Free Shipping": 0.0}
N_CUSTOMERS = 60
N_ORDERS = 300
HISTORY_START = date(2022, 1, 1)
HISTORY_DAYS = 730  # orders and reviews span 2022-2023
DEFAULT_CUSTOMER_ORDERS = 14  # the default account's history spans two pages of ten


def slugify(name: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def _day(rng: random.Random) -> str:
    return (HISTORY_START + timedelta(days=rng.randrange(HISTORY_DAYS))).isoformat()


def _categories(conn: sqlite3.Connection) -> dict[str, tuple[int, str]]:
    """Insert departments and leaves; return leaf name -> (id, department)."""
    leaves: dict[str, tuple[int, str]] = {}
    for dept, children in CATALOG.items():
        cur = conn.execute("INSERT INTO categories (name, slug, parent_id) VALUES (?, ?, NULL)", (dept, slugify(dept)))
        dept_id = cur.lastrowid
        for leaf in children:
            cur = conn.execute("INSERT INTO categories (name, slug, parent_id) VALUES (?, ?, ?)",
                               (leaf, slugify(leaf), dept_id))
            leaves[leaf] = (int(cur.lastrowid), dept)
    return leaves


def _reviews(conn: sqlite3.Connection, rng: random.Random, product_id: int, quality: float) -> tuple[float, int]:
    """Insert a product's reviews; return (mean rating rounded to 0.1, count)."""
    count = rng.choice([0, 1, 2, 3, 4, 5, 6, 8, 10, 12])
    stars = [max(1, min(5, round(rng.gauss(quality, 1.0)))) for _ in range(count)]
    for s in stars:
        author = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)[0]}."
        conn.execute("INSERT INTO reviews (product_id, author, rating, title, body, created) VALUES (?,?,?,?,?,?)",
                     (product_id, author, s, rng.choice(REVIEW_TITLES[s]), REVIEW_BODIES[s], _day(rng)))
    return (round(sum(stars) / count, 1) if count else 0.0), count


def _products(conn: sqlite3.Connection, rng: random.Random, leaves: dict[str, tuple[int, str]]) -> None:
    names: set[str] = set()
    sku_n = 1000
    for leaf, (cat_id, dept) in leaves.items():
        nouns = CATALOG[dept][leaf]
        for _ in range(rng.randint(19, 26)):
            while True:
                brand, adj, noun, color = (rng.choice(BRANDS[dept]), rng.choice(ADJECTIVES), rng.choice(nouns),
                                           rng.choice(COLORS))
                name = f"{brand} {adj} {noun}, {color}"
                if name not in names:
                    names.add(name)
                    break
            lo, hi = PRICE_RANGE[dept]
            price = round(rng.uniform(lo, hi), 0) - 0.01
            sku_n += rng.randint(1, 9)
            description = (f"The {adj.lower()} {noun.lower()} from {brand}, in {color.lower()}. "
                           f"Part of our {leaf} range.")
            cur = conn.execute(
                "INSERT INTO products (sku, name, category_id, brand, color, price, rating, review_count, stock,"
                " enabled, description, created) VALUES (?,?,?,?,?,?,0,0,?,1,?,?)",
                (f"{noun[:3].upper()}-{sku_n}", name, cat_id, brand, color, price, rng.randint(0, 250),
                 description, _day(rng)))
            rating, count = _reviews(conn, rng, int(cur.lastrowid), rng.uniform(2.5, 4.8))
            conn.execute("UPDATE products SET rating = ?, review_count = ? WHERE id = ?",
                         (rating, count, cur.lastrowid))


def _customers(conn: sqlite3.Connection, rng: random.Random) -> None:
    email, password = DEFAULT_ACCOUNTS["shopping"]
    people = [("Emma", "Lopez")]
    seen = {("Emma", "Lopez")}
    while len(people) < N_CUSTOMERS:
        pair = (rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES))
        if pair not in seen:
            seen.add(pair)
            people.append(pair)
    for i, (first, last) in enumerate(people):
        city, state, zip3 = rng.choice(CITIES)
        address = f"{rng.randint(10, 9999)} {rng.choice(STREETS)}"
        domain = rng.choice(["gmail.com", "yahoo.com", "outlook.com"])
        mail = email if i == 0 else f"{first.lower()}.{last.lower()}@{domain}"
        phone = f"({rng.randint(201, 989)}) 555-{rng.randint(1000, 9999)}"
        conn.execute("INSERT INTO customers (email, first_name, last_name, password_hash, phone, street, city, state,"
                     " zip, created) VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (mail, first, last, hash_password(password if i == 0 else f"pw-{mail}"), phone, address, city,
                      state, f"{zip3}{rng.randint(10, 99)}", _day(rng)))


def _orders(conn: sqlite3.Connection, rng: random.Random) -> None:
    products = conn.execute("SELECT id, name, sku, price FROM products ORDER BY id").fetchall()
    customers = conn.execute("SELECT id, first_name, last_name, street, city, state, zip FROM customers").fetchall()
    owners = [customers[0]] * DEFAULT_CUSTOMER_ORDERS + [rng.choice(customers[1:]) for _ in range(N_ORDERS)]
    dates = sorted(_day(rng) for _ in owners)
    rng.shuffle(owners)
    statuses, weights = list(ORDER_STATUSES), list(ORDER_STATUSES.values())
    for n, (customer, created) in enumerate(zip(owners, dates, strict=True), start=1):
        items = rng.sample(products, rng.randint(1, 4))
        qtys = [rng.choice([1, 1, 1, 2, 3]) for _ in items]
        subtotal = round(sum(p[3] * q for p, q in zip(items, qtys, strict=True)), 2)
        method = rng.choice(list(SHIPPING_METHODS))
        shipping = SHIPPING_METHODS[method]
        cur = conn.execute(
            "INSERT INTO orders (number, customer_id, status, created, subtotal, shipping, total, shipping_method,"
            " ship_name, ship_street, ship_city, ship_state, ship_zip) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (f"{n:09d}", customer[0], rng.choices(statuses, weights)[0], created, subtotal, shipping,
             round(subtotal + shipping, 2), method, f"{customer[1]} {customer[2]}", customer[3], customer[4],
             customer[5], customer[6]))
        for p, q in zip(items, qtys, strict=True):
            conn.execute("INSERT INTO order_items (order_id, product_id, name, sku, price, qty) VALUES (?,?,?,?,?,?)",
                         (cur.lastrowid, p[0], p[1], p[2], p[3], q))


def _default_customer_lists(conn: sqlite3.Connection, rng: random.Random) -> None:
    email = DEFAULT_ACCOUNTS["shopping"][0]
    ids = [r[0] for r in conn.execute("SELECT id FROM products WHERE enabled = 1 ORDER BY id")]
    picks = rng.sample(ids, 8)
    for pid in picks[:5]:
        conn.execute("INSERT INTO cart_items (owner, product_id, qty) VALUES (?, ?, ?)",
                     (email, pid, rng.randint(1, 2)))
    for pid in picks[5:]:
        conn.execute("INSERT INTO wishlist (customer_id, product_id) VALUES (1, ?)", (pid,))


def build(db_path: Path, seed: int) -> None:
    """Write the template ``shop`` database for ``seed`` at ``db_path``."""
    rng = random.Random(f"shop:{seed}")
    conn = sqlite3.connect(db_path)
    try:
        conn.executescript(SCHEMA)
        leaves = _categories(conn)
        _products(conn, rng, leaves)
        _customers(conn, rng)
        _orders(conn, rng)
        _default_customer_lists(conn, rng)
        user, password = DEFAULT_ACCOUNTS["shopping_admin"]
        conn.execute("INSERT INTO admin_users VALUES (?, ?, ?)", (user, hash_password(password), "Store Admin"))
        conn.commit()
    finally:
        conn.close()
