"""Task templates of the ``shopping`` storefront (ids 100-199) and their oracle solvers.

Information seeking (string_match), navigation (url_match) and state changes (program_html over the cart,
wish list, latest order, account and product pages). Answers come from the seed's ``shop`` database, the
same data the site serves; solvers read them off the page.
"""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import urlencode

from webrl.agent.observed_page import ObservedPage
from webrl.agent.schemas import Observation, TaskConfig
from webrl.sandbox.oracles import answer, do_click, do_select, do_type, read
from webrl.sandbox.sites.shopping.seed import ORDER_STATUSES, SHIPPING_METHODS
from webrl.sandbox.tasks.base import SiteData, Template, html_check, program_html, string_match, url_match

SITE = "shopping"
DB = "shop"
SEARCH_FIELD = "Search entire store here"
N_SAMPLES = 40  # candidate instantiations drawn per template (the suite keeps up to Template.max_instances)
DEFAULT_EMAIL = "emma.lopez@gmail.com"


def money(value: float) -> str:
    return f"${value:,.2f}"


def _products(data: SiteData, rng: random.Random, where: str = "1 = 1", n: int = N_SAMPLES) -> list[Any]:
    rows = data.rows(DB, f"SELECT * FROM products WHERE enabled = 1 AND {where} ORDER BY id")
    return rng.sample(rows, min(n, len(rows)))


def _categories(data: SiteData) -> list[Any]:
    return data.rows(DB, "SELECT * FROM categories ORDER BY id")


def _in_category(data: SiteData, cat_id: int) -> list[Any]:
    return data.rows(DB, "SELECT * FROM products WHERE enabled = 1 AND (category_id = ? OR category_id IN "
                         "(SELECT id FROM categories WHERE parent_id = ?)) ORDER BY id", cat_id, cat_id)


def _my_orders(data: SiteData) -> list[Any]:
    return data.rows(DB, "SELECT o.* FROM orders o JOIN customers c ON c.id = o.customer_id "
                         "WHERE c.email = ? ORDER BY o.id", DEFAULT_EMAIL)


# Shared solver steps ------------------------------------------------------------------------------------

def open_product(obs: Observation, name: str):
    """Search the store for the product's full name and open its page."""
    obs = yield from do_type(obs, SEARCH_FIELD, name, enter=True)
    return (yield from do_click(obs, name, ("a",), exact=True))


def open_category(obs: Observation, category: str):
    """Open the category through the "Shop by Category" dropdown."""
    obs = yield from do_click(obs, "Shop by Category", ("button",))
    return (yield from do_click(obs, category, ("a",), exact=True))


def listing_names(obs: Observation) -> list[str]:
    """Product names of a listing page, in order (the links after the toolbar's Apply button)."""
    page = ObservedPage(obs)
    names, started = [], False
    for element in page.elements:
        if element.tag == "button" and element.label == "Apply":
            started = True
        elif started and element.tag == "a" and element.label not in ("Previous", "Next"):
            names.append(element.label)
    return names


def open_my_order(obs: Observation, number: str):
    """My Account -> My Orders -> the order's "View Order" link (paging with Next)."""
    obs = yield from do_click(obs, "My Account", ("a",), exact=True)
    obs = yield from do_click(obs, "My Orders", ("a",), exact=True)
    for _ in range(3):
        if ObservedPage(obs).has(f"View Order {number}", ("a",), exact=True):
            break
        obs = yield from do_click(obs, "Next", ("a",), exact=True)
    return (yield from do_click(obs, f"View Order {number}", ("a",), exact=True))


def _slots(task: TaskConfig) -> dict[str, Any]:
    return dict(task.instantiation_dict or {})


# Information seeking ------------------------------------------------------------------------------------

def sample_product(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    return [{"product": p["name"], "_id": p["id"]} for p in _products(data, rng)]


def _product_row(data: SiteData, inst: dict[str, Any]) -> Any:
    return data.rows(DB, "SELECT * FROM products WHERE id = ?", inst["_id"])[0]


def solve_price(task: TaskConfig):
    obs = yield None
    obs = yield from open_product(obs, _slots(task)["product"])
    price = yield from read(obs, r"Price: (\$[\d,]+\.\d\d)")
    yield answer(price)


def solve_review_count(task: TaskConfig):
    obs = yield None
    obs = yield from open_product(obs, _slots(task)["product"])
    count = yield from read(obs, r"out of 5 \((\d+) reviews\)")
    yield answer(count)


def solve_rating(task: TaskConfig):
    obs = yield None
    obs = yield from open_product(obs, _slots(task)["product"])
    rating = yield from read(obs, r"([\d.]+) out of 5 \(")
    yield answer(rating)


def sample_rated_product(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    return [{"product": p["name"], "_id": p["id"]} for p in _products(data, rng, "review_count > 0")]


def _unique_first(rows: list[Any], key) -> Any | None:
    """The row with the smallest key if no other row ties with it, else None."""
    ordered = sorted(rows, key=key)
    if not ordered or (len(ordered) > 1 and key(ordered[0]) == key(ordered[1])):
        return None
    return ordered[0]


def sample_cheapest(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for cat in _categories(data):
        best = _unique_first(_in_category(data, cat["id"]), lambda p: p["price"])
        if best is not None:
            out.append({"category": cat["name"], "_answer": best["name"], "_slug": cat["slug"]})
    rng.shuffle(out)
    return out


def sample_top_rated(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for cat in _categories(data):
        best = _unique_first(_in_category(data, cat["id"]), lambda p: -p["rating"])
        if best is not None:
            out.append({"category": cat["name"], "_answer": best["name"], "_slug": cat["slug"]})
    rng.shuffle(out)
    return out


def _solve_sorted_first(task: TaskConfig, sort_label: str):
    obs = yield None
    obs = yield from open_category(obs, _slots(task)["category"])
    obs = yield from do_select(obs, "Sort By", sort_label)
    obs = yield from do_click(obs, "Apply", ("button",), exact=True)
    names = listing_names(obs)
    yield answer(names[0] if names else "")


def solve_cheapest(task: TaskConfig):
    return _solve_sorted_first(task, "Price: Low to High")


def solve_top_rated(task: TaskConfig):
    return _solve_sorted_first(task, "Top Rated")


def sample_category_count(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    out = [{"category": c["name"], "_slug": c["slug"], "_answer": str(len(_in_category(data, c["id"])))}
           for c in _categories(data)]
    rng.shuffle(out)
    return out


def solve_category_count(task: TaskConfig):
    obs = yield None
    obs = yield from open_category(obs, _slots(task)["category"])
    count = yield from read(obs, r"(\d+) items")
    yield answer(count)


def sample_my_order(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    rows = _my_orders(data)
    rng.shuffle(rows)
    return [{"order": o["number"], "_status": o["status"], "_total": money(o["total"])} for o in rows]


def solve_order_status(task: TaskConfig):
    obs = yield None
    obs = yield from open_my_order(obs, _slots(task)["order"])
    status = yield from read(obs, r"Status: (" + "|".join(ORDER_STATUSES) + ")")
    yield answer(status)


def solve_order_total(task: TaskConfig):
    obs = yield None
    obs = yield from open_my_order(obs, _slots(task)["order"])
    total = yield from read(obs, r"Grand Total: (\$[\d,]+\.\d\d)")
    yield answer(total)


def sample_status_count(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    rows = _my_orders(data)
    return [{"status": s, "_answer": str(sum(o["status"] == s for o in rows))} for s in ORDER_STATUSES]


def solve_status_count(task: TaskConfig):
    obs = yield None
    obs = yield from do_click(obs, "My Account", ("a",), exact=True)
    obs = yield from do_click(obs, "My Orders", ("a",), exact=True)
    obs = yield from do_select(obs, "Order Status", _slots(task)["status"])
    obs = yield from do_click(obs, "Filter", ("button",), exact=True)
    count = yield from read(obs, r"(\d+) orders")
    yield answer(count)


# Navigation ---------------------------------------------------------------------------------------------

def sample_category(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    out = [{"category": c["name"], "_slug": c["slug"]} for c in _categories(data)]
    rng.shuffle(out)
    return out


def solve_open_category(task: TaskConfig):
    obs = yield None
    obs = yield from open_category(obs, _slots(task)["category"])
    yield answer("")


def solve_category_sorted(task: TaskConfig):
    obs = yield None
    obs = yield from open_category(obs, _slots(task)["category"])
    obs = yield from do_select(obs, "Sort By", "Price: Low to High")
    obs = yield from do_click(obs, "Apply", ("button",), exact=True)
    yield answer("")


def sample_query(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    from webrl.sandbox.sites.shopping.seed import CATALOG

    nouns = sorted({n.lower() for leaves in CATALOG.values() for nouns in leaves.values() for n in nouns})
    rng.shuffle(nouns)
    return [{"query": n} for n in nouns]


def solve_search(task: TaskConfig):
    obs = yield None
    obs = yield from do_type(obs, SEARCH_FIELD, _slots(task)["query"], enter=True)
    yield answer("")


def solve_open_order(task: TaskConfig):
    obs = yield None
    obs = yield from open_my_order(obs, _slots(task)["order"])
    yield answer("")


# State changes ------------------------------------------------------------------------------------------

def _cart_rows(product_id: int) -> str:
    return f"document.querySelectorAll('.cart-item[data-product-id=\"{product_id}\"]')"


def eval_in_cart(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    return program_html(html_check("__SHOPPING__/cart", "document.querySelector('.cart-items').outerText",
                                   must_include=[inst["product"]]))


def solve_add_to_cart(task: TaskConfig):
    obs = yield None
    obs = yield from open_product(obs, _slots(task)["product"])
    obs = yield from do_click(obs, "Add to Cart", ("button",), exact=True)
    yield answer("")


def sample_product_qty(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    return [{"qty": rng.randint(2, 5), "product": p["name"], "_id": p["id"]} for p in _products(data, rng)]


def eval_cart_qty(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    locator = f"document.querySelector('.cart-item[data-product-id=\"{inst['_id']}\"] input.qty').value"
    return program_html(html_check("__SHOPPING__/cart", locator, exact_match=str(inst["qty"])))


def solve_add_qty(task: TaskConfig):
    obs = yield None
    slots = _slots(task)
    obs = yield from open_product(obs, slots["product"])
    obs = yield from do_type(obs, "Qty", str(slots["qty"]))
    obs = yield from do_click(obs, "Add to Cart", ("button",), exact=True)
    yield answer("")


def sample_not_wished(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    rows = _products(data, rng, "id NOT IN (SELECT product_id FROM wishlist WHERE customer_id = 1)")
    return [{"product": p["name"], "_id": p["id"]} for p in rows]


def eval_wishlist(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    return program_html(html_check("__SHOPPING__/account/wishlist",
                                   "document.querySelector('.wishlist-items').outerText",
                                   must_include=[inst["product"]]))


def solve_wishlist(task: TaskConfig):
    obs = yield None
    obs = yield from open_product(obs, _slots(task)["product"])
    obs = yield from do_click(obs, "Add to Wish List", ("button",), exact=True)
    yield answer("")


def sample_in_my_cart(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    rows = data.rows(DB, "SELECT p.* FROM cart_items c JOIN products p ON p.id = c.product_id WHERE c.owner = ? "
                         "ORDER BY c.id", DEFAULT_EMAIL)
    return [{"product": p["name"], "_id": p["id"]} for p in rows]


def eval_removed(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    return program_html(
        html_check("__SHOPPING__/cart", f"{_cart_rows(inst['_id'])}.length", exact_match="0"),
        html_check("__SHOPPING__/cart", "document.querySelectorAll('.cart-item').length",
                   exact_match=str(len(sample_in_my_cart(data, random.Random())) - 1)))


def solve_remove_from_cart(task: TaskConfig):
    obs = yield None
    obs = yield from do_click(obs, "My Cart", ("a",))
    obs = yield from do_click(obs, f"Remove {_slots(task)['product']}", ("button",), exact=True)
    yield answer("")


def sample_purchase(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    methods = list(SHIPPING_METHODS)
    return [{"product": p["name"], "method": rng.choice(methods), "_id": p["id"]} for p in _products(data, rng)]


def eval_purchase(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    url = "__SHOPPING__/account/orders/latest"
    return program_html(
        html_check(url, "document.querySelector('.order-items').outerText", must_include=[inst["product"]]),
        html_check(url, "document.querySelector('.order-totals').outerText", must_include=[inst["method"]]))


def solve_purchase(task: TaskConfig):
    obs = yield None
    slots = _slots(task)
    obs = yield from open_product(obs, slots["product"])
    obs = yield from do_click(obs, "Add to Cart", ("button",), exact=True)
    obs = yield from do_click(obs, "My Cart", ("a",))
    obs = yield from do_click(obs, "Proceed to Checkout", ("a",), exact=True)
    obs = yield from do_select(obs, "Shipping Method", slots["method"])
    obs = yield from do_click(obs, "Place Order", ("button",), exact=True)
    yield answer("")


def sample_phone(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    return [{"phone": f"({rng.randint(201, 989)}) 555-{rng.randint(1000, 9999)}"} for _ in range(N_SAMPLES)]


def eval_phone(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    return program_html(html_check("__SHOPPING__/account/edit",
                                   "document.querySelector('input[name=\"phone\"]').value",
                                   exact_match=inst["phone"]))


def solve_phone(task: TaskConfig):
    obs = yield None
    obs = yield from do_click(obs, "My Account", ("a",), exact=True)
    obs = yield from do_click(obs, "Account Information", ("a",), exact=True)
    obs = yield from do_type(obs, "Phone Number", _slots(task)["phone"])
    obs = yield from do_click(obs, "Save", ("button",), exact=True)
    yield answer("")


REVIEW_TITLES = ["Great for everyday use", "Not what I expected", "Solid value", "Would buy again",
                 "Stopped working", "Nice quality", "Arrived damaged", "Exactly as described", "Too small",
                 "Better than the photos"]


def sample_review(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    return [{"stars": rng.randint(1, 5), "product": p["name"], "title": rng.choice(REVIEW_TITLES), "_id": p["id"]}
            for p in _products(data, rng)]


def eval_review(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    url = f"__SHOPPING__/product/{inst['_id']}"
    return program_html(
        html_check(url, "document.querySelector('.review-list .review b').textContent", exact_match=inst["title"]),
        html_check(url, "document.querySelector('.review-list .review').dataset.rating",
                   exact_match=str(inst["stars"])))


def solve_review(task: TaskConfig):
    obs = yield None
    slots = _slots(task)
    obs = yield from open_product(obs, slots["product"])
    obs = yield from do_click(obs, "Reviews", ("a",))
    obs = yield from do_select(obs, "Your Rating", f"{slots['stars']} stars")
    obs = yield from do_type(obs, "Summary", slots["title"])
    obs = yield from do_click(obs, "Submit Review", ("button",), exact=True)
    yield answer("")


def _url(path: str, **query: Any) -> str:
    return f"__SHOPPING__{path}" + (f"?{urlencode(query)}" if query else "")


TEMPLATES: list[Template] = [
    Template(101, SITE, "What is the price of {{product}}?", "info", sample_product,
             lambda i, d: string_match(must_include=[money(_product_row(d, i)["price"])]), solve_price),
    Template(102, SITE, "How many reviews does {{product}} have?", "info", sample_product,
             lambda i, d: string_match(exact_match=str(_product_row(d, i)["review_count"])), solve_review_count),
    Template(103, SITE, "What is the average star rating of {{product}}?", "info", sample_rated_product,
             lambda i, d: string_match(must_include=[f"{_product_row(d, i)['rating']:.1f}"]), solve_rating),
    Template(104, SITE, "What is the cheapest product in the {{category}} category?", "info", sample_cheapest,
             lambda i, d: string_match(must_include=[i["_answer"]]), solve_cheapest),
    Template(105, SITE, "Which product in the {{category}} category has the highest rating?", "info",
             sample_top_rated, lambda i, d: string_match(must_include=[i["_answer"]]), solve_top_rated),
    Template(106, SITE, "How many products are in the {{category}} category?", "info", sample_category_count,
             lambda i, d: string_match(exact_match=i["_answer"]), solve_category_count),
    Template(107, SITE, "What is the status of my order number {{order}}?", "info", sample_my_order,
             lambda i, d: string_match(exact_match=i["_status"]), solve_order_status, require_login=True),
    Template(108, SITE, "How much did I pay in total for order number {{order}}?", "info", sample_my_order,
             lambda i, d: string_match(must_include=[i["_total"]]), solve_order_total, require_login=True),
    Template(109, SITE, "How many of my orders have the status {{status}}?", "info", sample_status_count,
             lambda i, d: string_match(exact_match=i["_answer"]), solve_status_count, require_login=True),
    Template(110, SITE, "Show me the products in the {{category}} category", "nav", sample_category,
             lambda i, d: url_match(_url(f"/category/{i['_slug']}")), solve_open_category),
    Template(111, SITE, "Search the store for \"{{query}}\"", "nav", sample_query,
             lambda i, d: url_match(_url("/search", q=i["query"])), solve_search),
    Template(112, SITE, "Show me the {{category}} category sorted by price from low to high", "nav", sample_category,
             lambda i, d: url_match(_url(f"/category/{i['_slug']}", sort="price_asc")), solve_category_sorted),
    Template(113, SITE, "Open the details page of my order number {{order}}", "nav", sample_my_order,
             lambda i, d: url_match(_url(f"/account/orders/{i['order']}")), solve_open_order, require_login=True),
    Template(114, SITE, "Add {{product}} to my shopping cart", "mutate", sample_product, eval_in_cart,
             solve_add_to_cart),
    Template(115, SITE, "Add {{qty}} units of {{product}} to my shopping cart", "mutate", sample_product_qty,
             eval_cart_qty, solve_add_qty),
    Template(116, SITE, "Add {{product}} to my wish list", "mutate", sample_not_wished, eval_wishlist,
             solve_wishlist, require_login=True),
    Template(117, SITE, "Remove {{product}} from my shopping cart", "mutate", sample_in_my_cart, eval_removed,
             solve_remove_from_cart, require_login=True),
    Template(118, SITE, "Buy {{product}} with {{method}} shipping", "mutate", sample_purchase, eval_purchase,
             solve_purchase, require_login=True),
    Template(119, SITE, "Change the phone number of my account to {{phone}}", "mutate", sample_phone, eval_phone,
             solve_phone, require_login=True),
    Template(120, SITE, "Write a {{stars}}-star review of {{product}} titled \"{{title}}\"", "mutate",
             sample_review, eval_review, solve_review, require_login=True),
]
