"""The shopping and shopping_admin sites over HTTP: pages render, forms change state, logins work."""

from __future__ import annotations

import uuid

import httpx
import pytest

from webrl.config import Settings
from webrl.sandbox.auth import DEFAULT_ACCOUNTS, login_cookies, verify_session
from webrl.sandbox.store import EPISODE_COOKIE


def _client(sandbox: Settings, site: str | None = None) -> httpx.Client:
    cookies = {EPISODE_COOKIE: uuid.uuid4().hex}
    if site:
        cookie = login_cookies(site, sandbox.site_url(site))[0]
        cookies[cookie["name"]] = cookie["value"]
    return httpx.Client(cookies=cookies, timeout=30, follow_redirects=True)


@pytest.mark.parametrize("path, text", [
    ("/", "Top rated products"),
    ("/category/electronics", "items"),
    ("/category/electronics?sort=price_desc&page=2", "Page 2 of"),
    ("/category/skin-care?min_price=10&max_price=40", "Apply"),
    ("/search?q=yoga+mat", "Search results for: &#39;yoga mat&#39;"),
    ("/product/1", "Add to Cart"),
    ("/cart", "Shopping Cart"),
    ("/login", "Customer Login"),
])
def test_storefront_pages_render(sandbox: Settings, path: str, text: str) -> None:
    r = httpx.get(sandbox.site_url("shopping") + path)
    assert r.status_code == 200 and text in r.text


def test_listing_pages_hold_twenty_products(sandbox: Settings) -> None:
    html = httpx.get(sandbox.site_url("shopping") + "/category/electronics").text
    assert html.count('class="product-item"') == 20
    assert "Next" in html


def test_account_pages_need_login(sandbox: Settings) -> None:
    r = httpx.get(sandbox.site_url("shopping") + "/account/orders", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=/account/orders")
    r = httpx.get(sandbox.site_url("shopping_admin") + "/sales/orders", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")


def test_login_form_accepts_the_default_account_and_rejects_a_wrong_password(sandbox: Settings) -> None:
    email, password = DEFAULT_ACCOUNTS["shopping"]
    with _client(sandbox) as client:
        bad = client.post(sandbox.site_url("shopping") + "/login", data={"email": email, "password": "nope"})
        assert bad.status_code == 401 and "sign-in was incorrect" in bad.text
        ok = client.post(sandbox.site_url("shopping") + "/login", data={"email": email, "password": password})
        assert ok.status_code == 200 and "My Account" in ok.text and email in ok.text
    user, password = DEFAULT_ACCOUNTS["shopping_admin"]
    with _client(sandbox) as client:
        ok = client.post(sandbox.site_url("shopping_admin") + "/login", data={"username": user, "password": password})
        assert "Dashboard" in ok.text


def test_session_cookies_cannot_be_forged() -> None:
    value = login_cookies("shopping", "http://x")[0]["value"]
    assert verify_session("shopping", value) == DEFAULT_ACCOUNTS["shopping"][0]
    assert verify_session("shopping_admin", value) is None
    assert verify_session("shopping", value[:-1] + ("0" if value[-1] != "0" else "1")) is None


def test_cart_checkout_and_order_history(sandbox: Settings) -> None:
    base = sandbox.site_url("shopping")
    with _client(sandbox, "shopping") as client:
        client.post(f"{base}/cart/add", data={"product_id": 42, "qty": 3})
        cart = client.get(f"{base}/cart").text
        assert 'data-product-id="42"' in cart and 'value="3"' in cart
        page = client.post(f"{base}/checkout", data={"name": "Emma Lopez", "street": "1 Main St", "city": "Austin",
                                                    "state": "TX", "zip": "78701", "shipping_method": "Express"})
        assert "Thank you for your purchase!" in page.text
        latest = client.get(f"{base}/account/orders/latest").text
        assert "Express" in latest and "Status: Pending" in latest
        assert "You have no items" in client.get(f"{base}/cart").text
        bad = client.post(f"{base}/checkout", data={"name": "x", "street": "x", "city": "x", "state": "x", "zip": "x",
                                                   "shipping_method": "Teleport"})
        assert bad.status_code == 422 and "shipping_method" in bad.text


def test_review_wishlist_and_account_forms(sandbox: Settings) -> None:
    base = sandbox.site_url("shopping")
    with _client(sandbox, "shopping") as client:
        page = client.post(f"{base}/product/9/reviews", data={"rating": 2, "title": "Too loud", "body": ""}).text
        assert "Too loud" in page and 'data-rating="2"' in page
        assert 'data-product-id="100"' in client.post(f"{base}/wishlist/add", data={"product_id": 100}).text
        client.post(f"{base}/account/edit", data={"first_name": "Emma", "last_name": "Lopez", "phone": "555-0000"})
        assert 'value="555-0000"' in client.get(f"{base}/account/edit").text


@pytest.mark.parametrize("path, text", [
    ("/", "Lifetime Sales"),
    ("/sales/orders?status=Pending", "records found"),
    ("/sales/orders/000000001", "Order # 000000001"),
    ("/catalog/products?q=yoga", "records found"),
    ("/catalog/products/1", "Save"),
    ("/customers?q=lopez", "emma.lopez@gmail.com"),
    ("/customers/1", "Total orders"),
    ("/reports/sales?date_from=2023-01-01&date_to=2023-01-31", "Total Revenue"),
    ("/reports/bestsellers?period=2023-01", "Units Sold"),
])
def test_admin_pages_render(sandbox: Settings, path: str, text: str) -> None:
    with _client(sandbox, "shopping_admin") as client:
        r = client.get(sandbox.site_url("shopping_admin") + path)
    assert r.status_code == 200 and text in r.text


def test_admin_order_actions(sandbox: Settings) -> None:
    admin = sandbox.site_url("shopping_admin")
    with _client(sandbox, "shopping_admin") as client:
        grid = client.get(f"{admin}/sales/orders?status=Pending").text
        number = grid.split('title="View order ')[1].split('"')[0]
        page = client.post(f"{admin}/sales/orders/{number}/comments", data={"comment": "Call first"}).text
        assert "Call first" in page
        assert "On Hold" in client.post(f"{admin}/sales/orders/{number}/hold").text
        assert 'class="order-status">Canceled' in client.post(f"{admin}/sales/orders/{number}/cancel").text
        again = client.post(f"{admin}/sales/orders/{number}/cancel")
        assert again.status_code == 422
