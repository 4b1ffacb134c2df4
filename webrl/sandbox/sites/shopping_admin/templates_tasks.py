"""Task templates of the ``shopping_admin`` back office (ids 200-299) and their oracle solvers.

Every admin task needs the admin login (WebArena's admin tasks do too). State changes are checked on the
admin pages, and a price change on the storefront (the two sites share the ``shop`` database).
"""

from __future__ import annotations

import random
import re
from typing import Any
from urllib.parse import urlencode

from webrl.agent.observed_page import ObservedPage
from webrl.agent.schemas import Observation, TaskConfig
from webrl.sandbox.oracles import answer, do_click, do_select, do_type, read
from webrl.sandbox.sites.shopping.seed import ORDER_STATUSES
from webrl.sandbox.sites.shopping_admin.app import CANCELLABLE, REVENUE_STATUSES, month_label
from webrl.sandbox.tasks.base import SiteData, Template, html_check, program_html, string_match, url_match

SITE = "shopping_admin"
DB = "shop"
N_SAMPLES = 40  # candidate instantiations drawn per template


def money(value: float) -> str:
    return f"${value:,.2f}"


def _slots(task: TaskConfig) -> dict[str, Any]:
    return dict(task.instantiation_dict or {})


def _sample(rows: list[Any], rng: random.Random, n: int = N_SAMPLES) -> list[Any]:
    return rng.sample(rows, min(n, len(rows)))


def _url(path: str, **query: Any) -> str:
    return f"__SHOPPING_ADMIN__{path}" + (f"?{urlencode(query)}" if query else "")


# Shared solver steps ------------------------------------------------------------------------------------

def menu(obs: Observation, section: str, item: str):
    """Open a page from the side menu: the section's dropdown, then the item."""
    obs = yield from do_click(obs, section, ("button",), exact=True)
    return (yield from do_click(obs, item, ("a",), exact=True))


def open_order(obs: Observation, number: str):
    obs = yield from menu(obs, "Sales", "Orders")
    obs = yield from do_type(obs, "Search by order # or customer", number, enter=True)
    return (yield from do_click(obs, f"View order {number}", ("a",), exact=True))


def open_product_edit(obs: Observation, name: str):
    obs = yield from menu(obs, "Catalog", "Products")
    obs = yield from do_type(obs, "Search by keyword", name, enter=True)
    return (yield from do_click(obs, f"Edit {name}", ("a",), exact=True))


def open_customer(obs: Observation, name: str):
    obs = yield from menu(obs, "Customers", "All Customers")
    obs = yield from do_type(obs, "Search by name or email", name, enter=True)
    return (yield from do_click(obs, f"View {name}", ("a",), exact=True))


# Samplers -----------------------------------------------------------------------------------------------

def sample_status(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    return [{"status": s, "_answer": str(data.value(DB, "SELECT COUNT(*) FROM orders WHERE status = ?", s))}
            for s in ORDER_STATUSES]


def sample_customer(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    rows = data.rows(DB, "SELECT c.*, (SELECT COUNT(*) FROM orders o WHERE o.customer_id = c.id) AS n_orders "
                         "FROM customers c ORDER BY c.id")
    return [{"customer": f"{c['first_name']} {c['last_name']}", "_id": c["id"], "_email": c["email"],
             "_orders": str(c["n_orders"])} for c in _sample(rows, rng)]


def sample_product(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    rows = data.rows(DB, "SELECT * FROM products WHERE enabled = 1 ORDER BY id")
    return [{"product": p["name"], "_id": p["id"], "_stock": str(p["stock"]), "_price": p["price"]}
            for p in _sample(rows, rng)]


def _months(data: SiteData) -> list[str]:
    return [r[0] for r in data.rows(DB, "SELECT DISTINCT substr(created, 1, 7) FROM orders ORDER BY 1")]


def sample_month_range(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    from calendar import monthrange

    out = []
    marks = ",".join("?" * len(REVENUE_STATUSES))
    for month in _months(data):
        year, mon = map(int, month.split("-"))
        start, end = f"{month}-01", f"{month}-{monthrange(year, mon)[1]:02d}"
        revenue = data.value(DB, f"SELECT COALESCE(SUM(total), 0) FROM orders WHERE created >= ? AND created <= ? "
                                 f"AND status IN ({marks})", start, end, *REVENUE_STATUSES)
        out.append({"start": start, "end": end, "_answer": money(revenue)})
    rng.shuffle(out)
    return out


def sample_bestseller_month(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    from webrl.sandbox.sites.shopping_admin.app import bestseller_rows

    out = []
    for month in _months(data):
        rows = bestseller_rows(data.db(DB), month)
        if len(rows) >= 2 and rows[0]["units"] > rows[1]["units"]:
            out.append({"month": month_label(month), "_answer": rows[0]["name"]})
    rng.shuffle(out)
    return out


def sample_order(data: SiteData, rng: random.Random, statuses: tuple[str, ...]) -> list[dict[str, Any]]:
    marks = ",".join("?" * len(statuses))
    rows = data.rows(DB, f"SELECT * FROM orders WHERE status IN ({marks}) ORDER BY id", *statuses)
    return [{"order": o["number"]} for o in _sample(rows, rng)]


def sample_new_price(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for p in sample_product(data, rng):
        new = round(p["_price"] * rng.choice([0.8, 0.9, 1.1, 1.25]), 0) + 0.5
        out.append({"product": p["product"], "price": money(new), "_id": p["_id"]})
    return out


def sample_new_stock(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    return [{"product": p["product"], "qty": rng.randint(0, 400), "_id": p["_id"]} for p in sample_product(data, rng)]


COMMENTS = ["Customer asked for gift wrapping", "Called the customer about the delay", "Address verified by phone",
            "Leave the package at the back door", "Refund approved by the manager", "Ship with the next batch"]


def sample_comment(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    return [{"comment": rng.choice(COMMENTS), **o} for o in sample_order(data, rng, tuple(ORDER_STATUSES))]


# Solvers ------------------------------------------------------------------------------------------------

def solve_status_count(task: TaskConfig):
    obs = yield None
    obs = yield from menu(obs, "Sales", "Orders")
    obs = yield from do_select(obs, "Status", _slots(task)["status"])
    obs = yield from do_click(obs, "Filter", ("button",), exact=True)
    yield answer((yield from read(obs, r"(\d+) records found")))


def solve_email(task: TaskConfig):
    obs = yield None
    name = _slots(task)["customer"]
    obs = yield from menu(obs, "Customers", "All Customers")
    obs = yield from do_type(obs, "Search by name or email", name, enter=True)
    yield answer((yield from read(obs, re.escape(name) + r" (\S+@\S+)")))


def solve_customer_orders(task: TaskConfig):
    obs = yield None
    obs = yield from open_customer(obs, _slots(task)["customer"])
    yield answer((yield from read(obs, r"Total orders: (\d+)")))


def solve_revenue(task: TaskConfig):
    obs = yield None
    slots = _slots(task)
    obs = yield from menu(obs, "Reports", "Sales Report")
    obs = yield from do_type(obs, "From (YYYY-MM-DD)", slots["start"])
    obs = yield from do_type(obs, "To (YYYY-MM-DD)", slots["end"])
    obs = yield from do_click(obs, "Show Report", ("button",), exact=True)
    yield answer((yield from read(obs, r"to \S+ \d+ (\$[\d,]+\.\d\d)")))


def solve_bestseller(task: TaskConfig):
    obs = yield None
    obs = yield from menu(obs, "Reports", "Bestsellers")
    obs = yield from do_select(obs, "Period", _slots(task)["month"])
    obs = yield from do_click(obs, "Show Report", ("button",), exact=True)
    names, started = [], False
    for element in ObservedPage(obs).elements:
        started = started or (element.tag == "button" and element.label == "Show Report")
        if started and element.tag == "a":
            names.append(element.label)
    yield answer(names[0] if names else "")


def solve_stock(task: TaskConfig):
    obs = yield None
    name = _slots(task)["product"]
    obs = yield from menu(obs, "Catalog", "Products")
    obs = yield from do_type(obs, "Search by keyword", name, enter=True)
    yield answer((yield from read(obs, re.escape(name) + r" \S+ \$[\d,]+\.\d\d (\d+) (?:Enabled|Disabled)")))


def solve_nav_status(task: TaskConfig):
    obs = yield None
    obs = yield from menu(obs, "Sales", "Orders")
    obs = yield from do_select(obs, "Status", _slots(task)["status"])
    obs = yield from do_click(obs, "Filter", ("button",), exact=True)
    yield answer("")


def solve_nav_product(task: TaskConfig):
    obs = yield None
    obs = yield from open_product_edit(obs, _slots(task)["product"])
    yield answer("")


def solve_nav_customer(task: TaskConfig):
    obs = yield None
    obs = yield from open_customer(obs, _slots(task)["customer"])
    yield answer("")


def _solve_edit_field(task: TaskConfig, field: str, value: str):
    obs = yield None
    obs = yield from open_product_edit(obs, _slots(task)["product"])
    obs = yield from do_type(obs, field, value)
    obs = yield from do_click(obs, "Save", ("button",), exact=True)
    yield answer("")


def solve_price(task: TaskConfig):
    return _solve_edit_field(task, "Price", _slots(task)["price"].lstrip("$").replace(",", ""))


def solve_stock_update(task: TaskConfig):
    return _solve_edit_field(task, "Quantity", str(_slots(task)["qty"]))


def solve_disable(task: TaskConfig):
    obs = yield None
    obs = yield from open_product_edit(obs, _slots(task)["product"])
    obs = yield from do_select(obs, "Enable Product", "Disabled")
    obs = yield from do_click(obs, "Save", ("button",), exact=True)
    yield answer("")


def solve_cancel(task: TaskConfig):
    obs = yield None
    obs = yield from open_order(obs, _slots(task)["order"])
    obs = yield from do_click(obs, "Cancel", ("button",), exact=True)
    obs = yield from do_click(obs, "OK", ("button",), exact=True)
    yield answer("")


def solve_hold(task: TaskConfig):
    obs = yield None
    obs = yield from open_order(obs, _slots(task)["order"])
    obs = yield from do_click(obs, "Hold", ("button",), exact=True)
    yield answer("")


def solve_comment(task: TaskConfig):
    obs = yield None
    slots = _slots(task)
    obs = yield from open_order(obs, slots["order"])
    obs = yield from do_type(obs, "Comment", slots["comment"])
    obs = yield from do_click(obs, "Submit Comment", ("button",), exact=True)
    yield answer("")


# Eval blocks --------------------------------------------------------------------------------------------

def _status_check(number: str, status: str) -> dict[str, Any]:
    return program_html(html_check(_url(f"/sales/orders/{number}"),
                                   "document.querySelector('.order-status').textContent", exact_match=status))


def eval_price(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    return program_html(
        html_check(_url(f"/catalog/products/{inst['_id']}"), "document.querySelector('input[name=\"price\"]').value",
                   exact_match=inst["price"].lstrip("$").replace(",", "")),
        html_check(f"__SHOPPING__/product/{inst['_id']}", "document.querySelector('.product-info .price').textContent",
                   must_include=[inst["price"]]))


def eval_stock(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    return program_html(html_check(_url(f"/catalog/products/{inst['_id']}"),
                                   "document.querySelector('input[name=\"qty\"]').value", exact_match=str(inst["qty"])))


def eval_disabled(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    return program_html(html_check(_url(f"/catalog/products/{inst['_id']}"),
                                   "document.querySelector('select[name=\"status\"]').value", exact_match="disabled"))


def eval_comment(inst: dict[str, Any], data: SiteData) -> dict[str, Any]:
    return program_html(html_check(_url(f"/sales/orders/{inst['order']}"),
                                   "document.querySelector('.order-comments').textContent",
                                   must_include=[inst["comment"]]))


def _t(tid: int, intent: str, kind: str, sample, evaluation, solver) -> Template:
    return Template(tid, SITE, intent, kind, sample, evaluation, solver, require_login=True)  # type: ignore[arg-type]


TEMPLATES: list[Template] = [
    _t(201, "How many orders have the status {{status}}?", "info", sample_status,
       lambda i, d: string_match(exact_match=i["_answer"]), solve_status_count),
    _t(202, "What is the email address of the customer {{customer}}?", "info", sample_customer,
       lambda i, d: string_match(exact_match=i["_email"]), solve_email),
    _t(203, "How many orders has the customer {{customer}} placed?", "info", sample_customer,
       lambda i, d: string_match(exact_match=i["_orders"]), solve_customer_orders),
    _t(204, "What was the total revenue from orders placed between {{start}} and {{end}}?", "info",
       sample_month_range, lambda i, d: string_match(must_include=[i["_answer"]]), solve_revenue),
    _t(205, "What was the best-selling product in {{month}}?", "info", sample_bestseller_month,
       lambda i, d: string_match(must_include=[i["_answer"]]), solve_bestseller),
    _t(206, "How many units of {{product}} are in stock?", "info", sample_product,
       lambda i, d: string_match(exact_match=i["_stock"]), solve_stock),
    _t(207, "Show me all orders with the status {{status}}", "nav", sample_status,
       lambda i, d: url_match(_url("/sales/orders", status=i["status"])), solve_nav_status),
    _t(208, "Open the edit page of the product {{product}}", "nav", sample_product,
       lambda i, d: url_match(_url(f"/catalog/products/{i['_id']}")), solve_nav_product),
    _t(209, "Show me the customer page of {{customer}}", "nav", sample_customer,
       lambda i, d: url_match(_url(f"/customers/{i['_id']}")), solve_nav_customer),
    _t(210, "Change the price of {{product}} to {{price}}", "mutate", sample_new_price, eval_price, solve_price),
    _t(211, "Cancel order number {{order}}", "mutate", lambda d, r: sample_order(d, r, CANCELLABLE),
       lambda i, d: _status_check(i["order"], "Canceled"), solve_cancel),
    _t(212, "Set the stock quantity of {{product}} to {{qty}}", "mutate", sample_new_stock, eval_stock,
       solve_stock_update),
    _t(213, "Disable the product {{product}}", "mutate", sample_product, eval_disabled, solve_disable),
    _t(214, "Add the comment \"{{comment}}\" to order number {{order}}", "mutate", sample_comment, eval_comment,
       solve_comment),
    _t(215, "Put order number {{order}} on hold", "mutate",
       lambda d, r: sample_order(d, r, ("Pending", "Processing")),
       lambda i, d: _status_check(i["order"], "On Hold"), solve_hold),
]
