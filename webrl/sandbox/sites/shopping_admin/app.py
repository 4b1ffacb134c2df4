"""The ``shopping_admin`` sandbox site: the store's back office (WebArena's Magento admin), over the same
``shop`` database as ``shopping``, so a price changed here shows in the storefront.

Pages (all need the admin login): dashboard ``/``, ``/sales/orders`` (status filter, search, pages) and
``/sales/orders/<number>`` (cancel with a confirmation modal, hold/unhold, comments),
``/catalog/products`` and ``/catalog/products/<id>`` (edit name, price, quantity, status),
``/customers`` and ``/customers/<id>``, ``/reports/sales?from=&to=``, ``/reports/bestsellers?period=``.
The menu uses dropdowns (Sales, Catalog, Customers, Reports).
"""

from __future__ import annotations

import math
import sqlite3
from typing import Annotated, Any

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from webrl.sandbox.site import SiteContext
from webrl.sandbox.sites.shopping.seed import ORDER_STATUSES

GRID_PAGE_SIZE = 20  # rows per admin grid page (Magento's default is 20)
CANCELLABLE = ("Pending", "Processing", "On Hold")  # Magento cannot cancel complete or canceled orders
REVENUE_STATUSES = ("Pending", "Processing", "Complete", "On Hold")  # the sales report leaves out canceled


def money(value: float) -> str:
    return f"${value:,.2f}"


def _grid(db: sqlite3.Connection, select: str, where: str, params: list[Any], order: str, page: int
          ) -> tuple[list[sqlite3.Row], int, int]:
    total = int(db.execute(f"SELECT COUNT(*) FROM ({select} WHERE {where})", params).fetchone()[0])
    rows = db.execute(f"{select} WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?",
                      [*params, GRID_PAGE_SIZE, (page - 1) * GRID_PAGE_SIZE]).fetchall()
    return rows, total, max(1, math.ceil(total / GRID_PAGE_SIZE))


def _render(ctx: SiteContext, request: Request, template: str, **variables: Any) -> HTMLResponse:
    ctx.require_user(request)
    return ctx.render(request, template, money=money, **variables)


ORDER_SELECT = ("SELECT o.*, c.first_name || ' ' || c.last_name AS customer_name, c.email "
                "FROM orders o JOIN customers c ON c.id = o.customer_id")


def _add_dashboard_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/", response_class=HTMLResponse)
    def dashboard(request: Request) -> HTMLResponse:
        db = ctx.db(request)
        marks = ",".join("?" * len(REVENUE_STATUSES))
        lifetime = db.execute(f"SELECT COALESCE(SUM(total), 0), COUNT(*) FROM orders WHERE status IN ({marks})",
                              REVENUE_STATUSES).fetchone()
        last = db.execute(f"{ORDER_SELECT} ORDER BY o.id DESC LIMIT 5").fetchall()
        return _render(ctx, request, "dashboard.html", lifetime=lifetime[0], n_orders=lifetime[1], last=last)


def _add_order_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/sales/orders", response_class=HTMLResponse)
    def orders(request: Request, status: str = "", q: str = "", page: int = 1) -> HTMLResponse:
        where, params = "1 = 1", []
        if status:
            where, params = where + " AND o.status = ?", [*params, status]
        if q.strip():
            like = f"%{q.strip()}%"
            where += " AND (o.number LIKE ? OR c.first_name || ' ' || c.last_name LIKE ? OR c.email LIKE ?)"
            params += [like, like, like]
        rows, total, pages = _grid(ctx.db(request), ORDER_SELECT, where, params, "o.id DESC", max(page, 1))
        return _render(ctx, request, "orders.html", orders=rows, total=total, page=max(page, 1), pages=pages,
                       status=status, q=q, statuses=list(ORDER_STATUSES), query={"status": status, "q": q},
                       base_url="/sales/orders")

    @app.get("/sales/orders/{number}", response_class=HTMLResponse)
    def order(request: Request, number: str, saved: str = "") -> HTMLResponse:
        db = ctx.db(request)
        row = db.execute(f"{ORDER_SELECT} WHERE o.number = ?", (number,)).fetchone()
        if row is None:
            raise HTTPException(404, f"no order {number}")
        items = db.execute("SELECT * FROM order_items WHERE order_id = ? ORDER BY id", (row["id"],)).fetchall()
        comments = db.execute("SELECT * FROM order_comments WHERE order_id = ? ORDER BY id DESC",
                              (row["id"],)).fetchall()
        return _render(ctx, request, "order.html", order=row, items=items, comments=comments, saved=saved,
                       cancellable=row["status"] in CANCELLABLE)

    def _set_status(request: Request, number: str, allowed: tuple[str, ...], status: str, note: str
                    ) -> RedirectResponse:
        ctx.require_user(request)
        db = ctx.db(request)
        row = db.execute("SELECT status FROM orders WHERE number = ?", (number,)).fetchone()
        if row is None:
            raise HTTPException(404, f"no order {number}")
        if row["status"] not in allowed:
            raise HTTPException(422, f"order {number} is {row['status']}; it cannot be changed to {status}")
        db.execute("UPDATE orders SET status = ? WHERE number = ?", (status, number))
        db.commit()
        return RedirectResponse(f"/sales/orders/{number}?saved={note}", status_code=303)

    @app.post("/sales/orders/{number}/cancel")
    def cancel(request: Request, number: str) -> RedirectResponse:
        return _set_status(request, number, CANCELLABLE, "Canceled", "canceled")

    @app.post("/sales/orders/{number}/hold")
    def hold(request: Request, number: str) -> RedirectResponse:
        return _set_status(request, number, ("Pending", "Processing"), "On Hold", "held")

    @app.post("/sales/orders/{number}/unhold")
    def unhold(request: Request, number: str) -> RedirectResponse:
        return _set_status(request, number, ("On Hold",), "Processing", "released")

    @app.post("/sales/orders/{number}/comments")
    def comment(request: Request, number: str, comment: Annotated[str, Form()]) -> RedirectResponse:
        ctx.require_user(request)
        if not comment.strip():
            raise HTTPException(422, "comment must not be empty")
        db = ctx.db(request)
        row = db.execute("SELECT id FROM orders WHERE number = ?", (number,)).fetchone()
        if row is None:
            raise HTTPException(404, f"no order {number}")
        db.execute("INSERT INTO order_comments (order_id, body, created) VALUES (?, ?, date('now'))",
                   (row["id"], comment.strip()))
        db.commit()
        return RedirectResponse(f"/sales/orders/{number}?saved=comment", status_code=303)


def _add_catalog_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/catalog/products", response_class=HTMLResponse)
    def products(request: Request, q: str = "", page: int = 1) -> HTMLResponse:
        words = q.split()
        where = " AND ".join(["(p.name LIKE ? OR p.sku LIKE ?)"] * len(words)) or "1 = 1"
        params = [v for w in words for v in (f"%{w}%", f"%{w}%")]
        rows, total, pages = _grid(ctx.db(request), "SELECT p.* FROM products p", where, params, "p.id",
                                   max(page, 1))
        return _render(ctx, request, "products.html", products=rows, total=total, page=max(page, 1), pages=pages,
                       q=q, query={"q": q}, base_url="/catalog/products")

    @app.get("/catalog/products/{product_id}", response_class=HTMLResponse)
    def product(request: Request, product_id: int, saved: int = 0) -> HTMLResponse:
        row = ctx.db(request).execute("SELECT * FROM products WHERE id = ?", (product_id,)).fetchone()
        if row is None:
            raise HTTPException(404, f"no product {product_id}")
        return _render(ctx, request, "product_edit.html", product=row, saved=saved)

    @app.post("/catalog/products/{product_id}")
    def save_product(request: Request, product_id: int, name: Annotated[str, Form()], price: Annotated[str, Form()],
                     qty: Annotated[str, Form()], status: Annotated[str, Form()]) -> RedirectResponse:
        ctx.require_user(request)
        try:
            price_value = round(float(price.strip().lstrip("$").replace(",", "")), 2)
            qty_value = int(qty.strip())
        except ValueError:
            raise HTTPException(422, "price must be a number and qty an integer") from None
        if status not in ("enabled", "disabled") or price_value < 0 or qty_value < 0 or not name.strip():
            raise HTTPException(422, "status must be enabled|disabled; price, qty >= 0; name not empty")
        db = ctx.db(request)
        db.execute("UPDATE products SET name = ?, price = ?, stock = ?, enabled = ? WHERE id = ?",
                   (name.strip(), price_value, qty_value, int(status == "enabled"), product_id))
        db.commit()
        return RedirectResponse(f"/catalog/products/{product_id}?saved=1", status_code=303)


def _add_customer_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/customers", response_class=HTMLResponse)
    def customers(request: Request, q: str = "", page: int = 1) -> HTMLResponse:
        where, params = "1 = 1", []
        if q.strip():
            like = f"%{q.strip()}%"
            where = "(first_name || ' ' || last_name LIKE ? OR email LIKE ?)"
            params = [like, like]
        rows, total, pages = _grid(ctx.db(request), "SELECT * FROM customers", where, params, "id", max(page, 1))
        return _render(ctx, request, "customers.html", customers=rows, total=total, page=max(page, 1), pages=pages,
                       q=q, query={"q": q}, base_url="/customers")

    @app.get("/customers/{customer_id}", response_class=HTMLResponse)
    def customer(request: Request, customer_id: int) -> HTMLResponse:
        db = ctx.db(request)
        row = db.execute("SELECT * FROM customers WHERE id = ?", (customer_id,)).fetchone()
        if row is None:
            raise HTTPException(404, f"no customer {customer_id}")
        orders = db.execute("SELECT * FROM orders WHERE customer_id = ? ORDER BY id DESC", (customer_id,)).fetchall()
        return _render(ctx, request, "customer.html", customer=row, orders=orders)


def _add_report_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/reports/sales", response_class=HTMLResponse)
    def sales(request: Request, date_from: str = "", date_to: str = "") -> HTMLResponse:
        report = None
        if date_from and date_to:
            marks = ",".join("?" * len(REVENUE_STATUSES))
            report = ctx.db(request).execute(
                f"SELECT COUNT(*) AS n, COALESCE(SUM(total), 0) AS revenue FROM orders WHERE created >= ? "
                f"AND created <= ? AND status IN ({marks})", (date_from, date_to, *REVENUE_STATUSES)).fetchone()
        return _render(ctx, request, "report_sales.html", report=report, date_from=date_from, date_to=date_to)

    @app.get("/reports/bestsellers", response_class=HTMLResponse)
    def bestsellers(request: Request, period: str = "") -> HTMLResponse:
        db = ctx.db(request)
        months = [r[0] for r in db.execute("SELECT DISTINCT substr(created, 1, 7) FROM orders ORDER BY 1")]
        rows = bestseller_rows(db, period) if period else []
        return _render(ctx, request, "report_bestsellers.html", rows=rows, period=period, months=months,
                       month_label=month_label)


def month_label(period: str) -> str:
    """``2023-03`` -> ``March 2023``."""
    from calendar import month_name

    year, month = period.split("-")
    return f"{month_name[int(month)]} {year}"


def bestseller_rows(db: sqlite3.Connection, period: str) -> list[sqlite3.Row]:
    """Products by units sold in a month (``YYYY-MM``), canceled orders left out; ties by name."""
    return db.execute(
        "SELECT i.product_id, i.name, SUM(i.qty) AS units, SUM(i.qty * i.price) AS revenue FROM order_items i "
        "JOIN orders o ON o.id = i.order_id WHERE substr(o.created, 1, 7) = ? AND o.status != 'Canceled' "
        "GROUP BY i.product_id ORDER BY units DESC, i.name LIMIT 10", (period,)).fetchall()


def _add_login_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, next: str = "/") -> HTMLResponse:
        return ctx.render(request, "login.html", next=next, error=None)

    @app.post("/login", response_model=None)
    def login(request: Request, username: Annotated[str, Form()], password: Annotated[str, Form()],
              next: Annotated[str, Form()] = "/") -> RedirectResponse | HTMLResponse:
        row = ctx.db(request).execute("SELECT username, password_hash FROM admin_users WHERE username = ?",
                                      (username.strip(),)).fetchone()
        return ctx.login_attempt(request, row, password, next, "The account sign-in was incorrect or your account is "
                                 "disabled temporarily.", hash_column="password_hash", status_code=401)

    @app.get("/logout")
    def logout() -> RedirectResponse:
        return ctx.logout_response("/login")


def create_app(ctx: SiteContext) -> FastAPI:
    app = FastAPI(title="Magento Admin", docs_url=None, redoc_url=None, openapi_url=None)
    _add_dashboard_routes(app, ctx)
    _add_order_routes(app, ctx)
    _add_catalog_routes(app, ctx)
    _add_customer_routes(app, ctx)
    _add_report_routes(app, ctx)
    _add_login_routes(app, ctx)
    return app
