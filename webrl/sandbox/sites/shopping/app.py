"""The ``shopping`` sandbox site: a storefront like WebArena's "One Stop Market" (Magento), server-rendered.

Pages: home, ``/category/<slug>`` (filters: price range; sort; ``?page=``), ``/search?q=``,
``/product/<id>`` (tabs: Details / Reviews, add to cart, wish list, review form), ``/cart``,
``/checkout`` -> ``/checkout/success/<number>``, ``/login``, ``/account`` with ``/account/orders``
(status filter, pagination), ``/account/orders/<number>``, ``/account/orders/latest``, ``/account/wishlist``,
``/account/edit``. The cart belongs to the logged-in customer, or to ``guest`` (the database is per episode).
"""

from __future__ import annotations

import math
import sqlite3
from typing import Annotated, Any

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from webrl.sandbox.site import SiteContext
from webrl.sandbox.sites.shopping.seed import ORDER_STATUSES, SHIPPING_METHODS

PAGE_SIZE = 20  # products per listing page (Magento's default grid shows 12-36; 20 keeps observations short)
ORDERS_PAGE_SIZE = 10  # Magento's "My Orders" default page size
GUEST = "guest"
#: sort key -> (label shown in the "Sort By" dropdown, SQL ORDER BY)
SORTS: dict[str, tuple[str, str]] = {
    "position": ("Position", "p.id"),
    "name": ("Product Name", "p.name"),
    "price_asc": ("Price: Low to High", "p.price, p.id"),
    "price_desc": ("Price: High to Low", "p.price DESC, p.id"),
    "rating": ("Top Rated", "p.rating DESC, p.review_count DESC, p.id"),
}
RATINGS = [5, 4, 3, 2, 1]


def money(value: float) -> str:
    return f"${value:,.2f}"


def pages(total: int, size: int) -> int:
    return max(1, math.ceil(total / size))


def owner(ctx: SiteContext, request: Request) -> str:
    return ctx.current_user(request) or GUEST


def customer(db: sqlite3.Connection, email: str) -> sqlite3.Row:
    row = db.execute("SELECT * FROM customers WHERE email = ?", (email,)).fetchone()
    if row is None:
        raise HTTPException(404, "customer not found")
    return row


def departments(db: sqlite3.Connection) -> list[dict[str, Any]]:
    tops = db.execute("SELECT * FROM categories WHERE parent_id IS NULL ORDER BY id").fetchall()
    return [{"dept": t, "children": db.execute("SELECT * FROM categories WHERE parent_id = ? ORDER BY id",
                                               (t["id"],)).fetchall()} for t in tops]


def cart_count(db: sqlite3.Connection, who: str) -> int:
    return int(db.execute("SELECT COALESCE(SUM(qty), 0) FROM cart_items WHERE owner = ?", (who,)).fetchone()[0])


def _page_vars(ctx: SiteContext, request: Request) -> dict[str, Any]:
    db = ctx.db(request)
    return {"departments": departments(db), "cart_count": cart_count(db, owner(ctx, request)), "money": money}


def _listing(db: sqlite3.Connection, where: str, params: list[Any], sort: str, page: int) -> tuple[list, int]:
    order = SORTS.get(sort, SORTS["position"])[1]
    total = db.execute(f"SELECT COUNT(*) FROM products p WHERE p.enabled = 1 AND {where}", params).fetchone()[0]
    rows = db.execute(f"SELECT p.* FROM products p WHERE p.enabled = 1 AND {where} ORDER BY {order} LIMIT ? OFFSET ?",
                      [*params, PAGE_SIZE, (page - 1) * PAGE_SIZE]).fetchall()
    return rows, int(total)


def _price_filter(min_price: str, max_price: str) -> tuple[str, list[Any]]:
    where, params = "1 = 1", []
    for text, op in ((min_price, ">="), (max_price, "<=")):
        if text.strip():
            try:
                value = float(text.strip().lstrip("$").replace(",", ""))
            except ValueError:
                raise HTTPException(422, f"price filter {text!r} is not a number") from None
            where += f" AND p.price {op} ?"
            params.append(value)
    return where, params


def _add_catalog_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/", response_class=HTMLResponse)
    def home(request: Request) -> HTMLResponse:
        db = ctx.db(request)
        top = db.execute("SELECT * FROM products WHERE enabled = 1 AND review_count >= 5 "
                         "ORDER BY rating DESC, review_count DESC, id LIMIT 8").fetchall()
        return ctx.render(request, "home.html", products=top, **_page_vars(ctx, request))

    @app.get("/category/{slug}", response_class=HTMLResponse)
    def category(request: Request, slug: str, page: int = 1, sort: str = "position", min_price: str = "",
                 max_price: str = "") -> HTMLResponse:
        db = ctx.db(request)
        cat = db.execute("SELECT * FROM categories WHERE slug = ?", (slug,)).fetchone()
        if cat is None:
            raise HTTPException(404, f"no category {slug!r}")
        where, params = _price_filter(min_price, max_price)
        where += " AND (p.category_id = ? OR p.category_id IN (SELECT id FROM categories WHERE parent_id = ?))"
        rows, total = _listing(db, where, [*params, cat["id"], cat["id"]], sort, max(page, 1))
        parent = db.execute("SELECT * FROM categories WHERE id = ?", (cat["parent_id"],)).fetchone()
        query = {"sort": sort, "min_price": min_price, "max_price": max_price}
        return ctx.render(request, "listing.html", title=cat["name"], category=cat, parent=parent, products=rows,
                          total=total, page=max(page, 1), pages=pages(total, PAGE_SIZE), query=query, sorts=SORTS,
                          base_url=f"/category/{slug}", **_page_vars(ctx, request))

    @app.get("/search", response_class=HTMLResponse)
    def search(request: Request, q: str = "", page: int = 1, sort: str = "position") -> HTMLResponse:
        words = q.split()
        where = " AND ".join(["p.name LIKE ?"] * len(words)) or "1 = 1"
        rows, total = _listing(ctx.db(request), where, [f"%{w}%" for w in words], sort, max(page, 1))
        return ctx.render(request, "listing.html", title=f"Search results for: '{q}'", category=None, parent=None,
                          products=rows, total=total, page=max(page, 1), pages=pages(total, PAGE_SIZE),
                          query={"q": q, "sort": sort}, sorts=SORTS, base_url="/search", q=q,
                          **_page_vars(ctx, request))

    @app.get("/product/{product_id}", response_class=HTMLResponse)
    def product(request: Request, product_id: int, added: int = 0, reviewed: int = 0) -> HTMLResponse:
        db = ctx.db(request)
        row = db.execute("SELECT * FROM products WHERE id = ?", (product_id,)).fetchone()
        if row is None or not row["enabled"]:
            return ctx.render(request, "not_found.html", status_code=404, **_page_vars(ctx, request))
        cat = db.execute("SELECT * FROM categories WHERE id = ?", (row["category_id"],)).fetchone()
        reviews = db.execute("SELECT * FROM reviews WHERE product_id = ? ORDER BY id DESC", (product_id,)).fetchall()
        return ctx.render(request, "product.html", product=row, category=cat, reviews=reviews, added=added,
                          reviewed=reviewed, ratings=RATINGS, **_page_vars(ctx, request))

    @app.post("/product/{product_id}/reviews")
    def add_review(request: Request, product_id: int, rating: Annotated[int, Form()],
                   title: Annotated[str, Form()], body: Annotated[str, Form()] = "") -> RedirectResponse:
        email = ctx.require_user(request)
        if rating not in RATINGS or not title.strip():
            raise HTTPException(422, "rating must be 1-5 and title must not be empty")
        db = ctx.db(request)
        me = customer(db, email)
        db.execute("INSERT INTO reviews (product_id, author, rating, title, body, created) "
                   "VALUES (?, ?, ?, ?, ?, date('now'))",
                   (product_id, f"{me['first_name']} {me['last_name'][0]}.", rating, title.strip(), body.strip()))
        stats = db.execute("SELECT AVG(rating), COUNT(*) FROM reviews WHERE product_id = ?", (product_id,)).fetchone()
        db.execute("UPDATE products SET rating = ?, review_count = ? WHERE id = ?",
                   (round(stats[0], 1), stats[1], product_id))
        db.commit()
        return RedirectResponse(f"/product/{product_id}?reviewed=1", status_code=303)


def _add_cart_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/cart", response_class=HTMLResponse)
    def cart(request: Request) -> HTMLResponse:
        db = ctx.db(request)
        items = db.execute("SELECT c.qty, p.* FROM cart_items c JOIN products p ON p.id = c.product_id "
                           "WHERE c.owner = ? ORDER BY c.id", (owner(ctx, request),)).fetchall()
        subtotal = sum(i["price"] * i["qty"] for i in items)
        return ctx.render(request, "cart.html", items=items, subtotal=subtotal, **_page_vars(ctx, request))

    @app.post("/cart/add")
    def cart_add(request: Request, product_id: Annotated[int, Form()], qty: Annotated[int, Form()] = 1
                 ) -> RedirectResponse:
        if qty < 1:
            raise HTTPException(422, "qty must be at least 1")
        db = ctx.db(request)
        if db.execute("SELECT 1 FROM products WHERE id = ? AND enabled = 1", (product_id,)).fetchone() is None:
            raise HTTPException(404, "product not found")
        db.execute("INSERT INTO cart_items (owner, product_id, qty) VALUES (?, ?, ?) "
                   "ON CONFLICT (owner, product_id) DO UPDATE SET qty = qty + excluded.qty",
                   (owner(ctx, request), product_id, qty))
        db.commit()
        return RedirectResponse(f"/product/{product_id}?added={qty}", status_code=303)

    @app.post("/cart/update")
    async def cart_update(request: Request) -> RedirectResponse:
        form = await request.form()
        db = ctx.db(request)
        for key, value in form.items():
            if key.startswith("qty_") and str(value).strip().isdigit():
                qty, pid = int(str(value)), int(key[4:])
                if qty == 0:
                    db.execute("DELETE FROM cart_items WHERE owner = ? AND product_id = ?", (owner(ctx, request), pid))
                else:
                    db.execute("UPDATE cart_items SET qty = ? WHERE owner = ? AND product_id = ?",
                               (qty, owner(ctx, request), pid))
        db.commit()
        return RedirectResponse("/cart", status_code=303)

    @app.post("/cart/remove")
    def cart_remove(request: Request, product_id: Annotated[int, Form()]) -> RedirectResponse:
        db = ctx.db(request)
        db.execute("DELETE FROM cart_items WHERE owner = ? AND product_id = ?", (owner(ctx, request), product_id))
        db.commit()
        return RedirectResponse("/cart", status_code=303)

    @app.get("/checkout", response_class=HTMLResponse)
    def checkout(request: Request) -> HTMLResponse:
        email = ctx.require_user(request)
        db = ctx.db(request)
        items = db.execute("SELECT c.qty, p.* FROM cart_items c JOIN products p ON p.id = c.product_id "
                           "WHERE c.owner = ? ORDER BY c.id", (email,)).fetchall()
        return ctx.render(request, "checkout.html", items=items, me=customer(db, email), methods=SHIPPING_METHODS,
                          subtotal=sum(i["price"] * i["qty"] for i in items), **_page_vars(ctx, request))

    @app.post("/checkout")
    def place_order(request: Request, name: Annotated[str, Form()], street: Annotated[str, Form()],
                    city: Annotated[str, Form()], state: Annotated[str, Form()], zip: Annotated[str, Form()],
                    shipping_method: Annotated[str, Form()]) -> RedirectResponse:
        email = ctx.require_user(request)
        if shipping_method not in SHIPPING_METHODS:
            raise HTTPException(422, f"shipping_method must be one of {list(SHIPPING_METHODS)}")
        db = ctx.db(request)
        number = _create_order(db, customer(db, email), (name, street, city, state, zip), shipping_method)
        db.commit()
        return RedirectResponse(f"/checkout/success/{number}", status_code=303)

    @app.get("/checkout/success/{number}", response_class=HTMLResponse)
    def success(request: Request, number: str) -> HTMLResponse:
        ctx.require_user(request)
        return ctx.render(request, "success.html", number=number, **_page_vars(ctx, request))


def _create_order(db: sqlite3.Connection, me: sqlite3.Row, address: tuple[str, ...], method: str) -> str:
    items = db.execute("SELECT c.qty, p.id, p.name, p.sku, p.price FROM cart_items c JOIN products p "
                       "ON p.id = c.product_id WHERE c.owner = ?", (me["email"],)).fetchall()
    if not items:
        raise HTTPException(422, "the cart is empty")
    last = db.execute("SELECT MAX(CAST(number AS INTEGER)) FROM orders").fetchone()[0] or 0
    number = f"{last + 1:09d}"
    subtotal = round(sum(i["price"] * i["qty"] for i in items), 2)
    shipping = SHIPPING_METHODS[method]
    cur = db.execute(
        "INSERT INTO orders (number, customer_id, status, created, subtotal, shipping, total, shipping_method,"
        " ship_name, ship_street, ship_city, ship_state, ship_zip) VALUES (?,?,?,date('now'),?,?,?,?,?,?,?,?,?)",
        (number, me["id"], "Pending", subtotal, shipping, round(subtotal + shipping, 2), method, *address))
    for i in items:
        db.execute("INSERT INTO order_items (order_id, product_id, name, sku, price, qty) VALUES (?,?,?,?,?,?)",
                   (cur.lastrowid, i["id"], i["name"], i["sku"], i["price"], i["qty"]))
    db.execute("DELETE FROM cart_items WHERE owner = ?", (me["email"],))
    return number


def _order_view(ctx: SiteContext, request: Request, order: sqlite3.Row | None) -> HTMLResponse:
    if order is None:
        raise HTTPException(404, "order not found")
    items = ctx.db(request).execute("SELECT * FROM order_items WHERE order_id = ? ORDER BY id",
                                    (order["id"],)).fetchall()
    return ctx.render(request, "order.html", order=order, items=items, **_page_vars(ctx, request))


def _add_account_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/account", response_class=HTMLResponse)
    def account(request: Request) -> HTMLResponse:
        db = ctx.db(request)
        me = customer(db, ctx.require_user(request))
        recent = db.execute("SELECT * FROM orders WHERE customer_id = ? ORDER BY id DESC LIMIT 3",
                            (me["id"],)).fetchall()
        return ctx.render(request, "account.html", me=me, recent=recent, **_page_vars(ctx, request))

    @app.get("/account/orders", response_class=HTMLResponse)
    def orders(request: Request, page: int = 1, status: str = "") -> HTMLResponse:
        db = ctx.db(request)
        me = customer(db, ctx.require_user(request))
        where, params = "customer_id = ?", [me["id"]]
        if status:
            where, params = where + " AND status = ?", [*params, status]
        total = db.execute(f"SELECT COUNT(*) FROM orders WHERE {where}", params).fetchone()[0]
        page = max(page, 1)
        rows = db.execute(f"SELECT * FROM orders WHERE {where} ORDER BY id DESC LIMIT ? OFFSET ?",
                          [*params, ORDERS_PAGE_SIZE, (page - 1) * ORDERS_PAGE_SIZE]).fetchall()
        return ctx.render(request, "orders.html", orders=rows, total=total, page=page,
                          pages=pages(total, ORDERS_PAGE_SIZE), status=status, statuses=list(ORDER_STATUSES),
                          query={"status": status}, base_url="/account/orders", **_page_vars(ctx, request))

    @app.get("/account/orders/latest", response_class=HTMLResponse)
    def latest_order(request: Request) -> HTMLResponse:
        db = ctx.db(request)
        me = customer(db, ctx.require_user(request))
        order = db.execute("SELECT * FROM orders WHERE customer_id = ? ORDER BY id DESC LIMIT 1", (me["id"],))
        return _order_view(ctx, request, order.fetchone())

    @app.get("/account/orders/{number}", response_class=HTMLResponse)
    def order(request: Request, number: str) -> HTMLResponse:
        db = ctx.db(request)
        me = customer(db, ctx.require_user(request))
        row = db.execute("SELECT * FROM orders WHERE number = ? AND customer_id = ?", (number, me["id"])).fetchone()
        return _order_view(ctx, request, row)

    @app.get("/account/wishlist", response_class=HTMLResponse)
    def wishlist(request: Request) -> HTMLResponse:
        db = ctx.db(request)
        me = customer(db, ctx.require_user(request))
        items = db.execute("SELECT p.* FROM wishlist w JOIN products p ON p.id = w.product_id "
                           "WHERE w.customer_id = ? ORDER BY w.id", (me["id"],)).fetchall()
        return ctx.render(request, "wishlist.html", items=items, **_page_vars(ctx, request))

    @app.post("/wishlist/add")
    def wishlist_add(request: Request, product_id: Annotated[int, Form()]) -> RedirectResponse:
        db = ctx.db(request)
        me = customer(db, ctx.require_user(request))
        db.execute("INSERT OR IGNORE INTO wishlist (customer_id, product_id) VALUES (?, ?)", (me["id"], product_id))
        db.commit()
        return RedirectResponse("/account/wishlist", status_code=303)

    @app.post("/wishlist/remove")
    def wishlist_remove(request: Request, product_id: Annotated[int, Form()]) -> RedirectResponse:
        db = ctx.db(request)
        me = customer(db, ctx.require_user(request))
        db.execute("DELETE FROM wishlist WHERE customer_id = ? AND product_id = ?", (me["id"], product_id))
        db.commit()
        return RedirectResponse("/account/wishlist", status_code=303)

    @app.get("/account/edit", response_class=HTMLResponse)
    def edit_account(request: Request, saved: int = 0) -> HTMLResponse:
        me = customer(ctx.db(request), ctx.require_user(request))
        return ctx.render(request, "account_edit.html", me=me, saved=saved, **_page_vars(ctx, request))

    @app.post("/account/edit")
    def save_account(request: Request, first_name: Annotated[str, Form()], last_name: Annotated[str, Form()],
                     phone: Annotated[str, Form()]) -> RedirectResponse:
        email = ctx.require_user(request)
        if not first_name.strip() or not last_name.strip():
            raise HTTPException(422, "first_name and last_name must not be empty")
        db = ctx.db(request)
        db.execute("UPDATE customers SET first_name = ?, last_name = ?, phone = ? WHERE email = ?",
                   (first_name.strip(), last_name.strip(), phone.strip(), email))
        db.commit()
        return RedirectResponse("/account/edit?saved=1", status_code=303)


def _add_login_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, next: str = "/account") -> HTMLResponse:
        return ctx.render(request, "login.html", next=next, error=None, **_page_vars(ctx, request))

    @app.post("/login", response_model=None)
    def login(request: Request, email: Annotated[str, Form()], password: Annotated[str, Form()],
              next: Annotated[str, Form()] = "/account") -> RedirectResponse | HTMLResponse:
        row = ctx.db(request).execute("SELECT email, password_hash FROM customers WHERE email = ?",
                                      (email.strip(),)).fetchone()
        return ctx.login_attempt(request, row, password, next, "The account sign-in was incorrect. Please try again.",
                                 user_column="email", hash_column="password_hash", status_code=401,
                                 home="/account", **_page_vars(ctx, request))

    @app.get("/logout")
    def logout() -> RedirectResponse:
        return ctx.logout_response("/")


def create_app(ctx: SiteContext) -> FastAPI:
    app = FastAPI(title="One Stop Market", docs_url=None, redoc_url=None, openapi_url=None)
    _add_catalog_routes(app, ctx)
    _add_cart_routes(app, ctx)
    _add_account_routes(app, ctx)
    _add_login_routes(app, ctx)
    return app
