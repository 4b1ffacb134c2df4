"""An asyncio pool of Chromium browsers (system Chromium through Playwright).

Browsers are launched once and reused; an episode leases a whole browser and runs in a context taken from
that browser's stock (``stock.py``): contexts made ahead of time in the background, or one scrubbed clean
after an earlier episode on the same origin, so a reset never waits for a context to be made.

A browser that died (crash, killed process) is noticed through its ``disconnected`` event and replaced at
the next lease; the episode that was using it ends with an error (see ``episode.py``) instead of hanging
the pool.

Each launched browser sends all its traffic through an allow-list proxy of its own
(:class:`~webrl.safety.allow_list_proxy.AllowListProxy`, loopback included), which follows the allow-list of the
browser's stock: the fence for what no in-browser hook sees (a worker's WebSocket).

With ``WEBRL_BROWSER__CDP_URL`` the browsers are not launched here: each slot connects to a fresh Chromium on a
browser server (``webrl browser serve``, :mod:`webrl.serving.browser_server`), so Chromium can run in a pod without the
pool's secrets and network; a lost connection is a dead browser, and the server kills the browser when the
connection goes. The connection names the allow-list of the browser's stock (``ALLOWED_HOSTS_HEADER``), which the
server's proxy for that browser applies narrowed to the server's own list, so a remote browser is as narrow as a
launched one (docs/security.md); an episode with another list gets a browser connected with that list.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

import psutil
from playwright.async_api import Browser, Playwright, async_playwright

from services.browser_pool.stock import ContextStock
from webrl.config import Settings
from webrl.safety.allow_list_proxy import AllowListProxy
from webrl.serving.browser_server import ALLOWED_HOSTS_HEADER, CHROMIUM_ARGS

log = logging.getLogger(__name__)

LAUNCH_TIMEOUT_MS = 60_000  # a cold Chromium start takes 1-2 s here; this only bounds a hang
CLOSE_TIMEOUT_S = 10.0  # closing a context of a wedged browser must not hang the pool


@dataclass
class BrowserSlot:
    """One browser process of the pool. ``marker`` is a switch on its command line that finds its pid."""

    index: int
    marker: str
    browser: Browser | None = None
    stock: ContextStock | None = None
    proxy: AllowListProxy | None = None  # a launched browser's allow-list proxy (none on a browser server)
    allowed: list[str] | None = None  # the allow-list its browser (and its proxy, here or on the server) follows
    launches: int = 0
    episodes: int = 0
    crashed: bool = field(default=False)

    @property
    def alive(self) -> bool:
        return self.browser is not None and self.browser.is_connected() and not self.crashed


class BrowserPool:
    """``size`` Chromium browsers; :meth:`acquire` leases one (waiting while all are busy). ``warm=False``
    makes a context per episode, as the pool did before it kept warm ones (the baseline ``bench/browser_pool.py``
    measures)."""

    def __init__(self, settings: Settings, size: int = 1, *, headless: bool = True, warm: bool = True) -> None:
        if size < 1:
            raise ValueError(f"pool size must be at least 1, got {size}")
        self.settings = settings
        self.size = size
        self.headless = headless
        self.warm = warm
        self._playwright: Playwright | None = None
        self._slots = [BrowserSlot(index=i, marker=f"--webrl-pool={uuid.uuid4().hex[:12]}-{i}") for i in range(size)]
        self._free: asyncio.Queue[BrowserSlot] = asyncio.Queue()
        self._start_lock = asyncio.Lock()
        self.restarts = 0
        self.leased = 0  # browsers leased now: the episodes in flight on this pool

    async def start(self) -> BrowserPool:
        """Start Playwright and launch every browser (one after another: launches are CPU-heavy)."""
        async with self._start_lock:
            if self._playwright is not None:
                return self
            self._playwright = await async_playwright().start()
            try:
                for slot in self._slots:
                    await self._launch(slot)
                    self._free.put_nowait(slot)
            except BaseException:  # no half-started pool: the next start (or acquire) tries again
                await self.close()
                self._free = asyncio.Queue()
                raise
        return self

    async def warm_up(self) -> None:
        """Start the pool ahead of its first lease (a service at startup), so that no request waits for a
        browser launch; a failure is logged here and raised again by the first :meth:`acquire`."""
        try:
            await self.start()
        except Exception as exc:
            log.warning("browser pool warm-up failed (the first episode will try again): %r", exc)

    async def __aenter__(self) -> BrowserPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _launch(self, slot: BrowserSlot, allowed: list[str] | None = None) -> None:
        """Launch the slot's Chromium, or, with ``browser.cdp_url``, connect to a fresh one on a browser server
        (``webrl.serving.browser_server``: Chromium in a pod of its own, which ends when the connection does); its
        proxy follows ``allowed`` (default: the configured list)."""
        assert self._playwright is not None
        allowed = list(allowed if allowed is not None else self.settings.host_allow_list())
        if self.settings.browser.cdp_url:
            browser = await self._connect(allowed)
        else:
            if slot.proxy is None:
                slot.proxy = await AllowListProxy(allowed).start()
            slot.proxy.set_allowed(allowed)
            browser = await self._playwright.chromium.launch(
                executable_path=self.settings.browser.chromium_path,
                args=[*CHROMIUM_ARGS, *slot.proxy.chromium_args(), slot.marker],
                headless=self.headless,
                timeout=LAUNCH_TIMEOUT_MS,
            )

        def _on_disconnect(_: Browser, slot: BrowserSlot = slot) -> None:
            if slot.browser is browser:
                slot.crashed = True
                log.warning("browser %d disconnected", slot.index)

        browser.on("disconnected", _on_disconnect)
        slot.browser, slot.crashed = browser, False
        slot.launches += 1
        slot.allowed = allowed
        slot.stock = await ContextStock.open(browser, allowed, warm=self.warm)

    async def _connect(self, allowed: list[str]) -> Browser:
        """A fresh browser on the browser server, its proxy told ``allowed`` (the server narrows its own list to it)."""
        assert self._playwright is not None
        token = self.settings.browser.cdp_token
        headers = {ALLOWED_HOSTS_HEADER: ",".join(allowed)} | ({"Authorization": f"Bearer {token}"} if token else {})
        return await self._playwright.chromium.connect_over_cdp(self.settings.browser.cdp_url, headers=headers,
                                                                timeout=LAUNCH_TIMEOUT_MS)

    async def stock(self, slot: BrowserSlot, allowed: list[str]) -> ContextStock:
        """The leased ``slot``'s stock of contexts for ``allowed`` (replacing one made for another list). A browser
        on a server is connected anew for another list: the server fixes a browser's list when it starts it."""
        assert slot.browser is not None
        if slot.stock is None or slot.stock.allowed != list(allowed):
            if self.settings.browser.cdp_url and slot.allowed != list(allowed):
                await self._discard(slot)
                await self._launch(slot, allowed)
                assert slot.stock is not None
                return slot.stock
            if slot.stock is not None:
                await slot.stock.close()
            if slot.proxy is not None:
                slot.proxy.set_allowed(allowed)
            slot.allowed = list(allowed)
            slot.stock = await ContextStock.open(slot.browser, allowed, warm=self.warm)
        return slot.stock

    async def acquire(self) -> BrowserSlot:
        """Lease a browser, relaunching it first if it died."""
        if self._playwright is None:
            await self.start()
        slot = await self._free.get()
        try:
            if not slot.alive:
                self.restarts += 1
                log.warning("replacing dead browser %d (restart %d)", slot.index, self.restarts)
                await self._discard(slot)
                await self._launch(slot, slot.allowed)
        except BaseException:
            self._free.put_nowait(slot)
            raise
        slot.episodes += 1
        self.leased += 1
        return slot

    def release(self, slot: BrowserSlot) -> None:
        self.leased -= 1
        self._free.put_nowait(slot)

    async def _discard(self, slot: BrowserSlot) -> None:
        stock, slot.stock = slot.stock, None
        if stock is not None:
            try:
                await asyncio.wait_for(stock.close(), CLOSE_TIMEOUT_S)
            except Exception as exc:  # the contexts of a dead browser are gone with it
                log.debug("closing the stock of browser %d: %r", slot.index, exc)
        browser, slot.browser = slot.browser, None
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), CLOSE_TIMEOUT_S)
            except Exception as exc:  # a dead browser may fail to close in many ways; it is gone either way
                log.debug("closing dead browser %d: %r", slot.index, exc)
        for proc in self._processes(slot):
            try:
                proc.kill()
            except psutil.Error:
                pass

    def _processes(self, slot: BrowserSlot) -> list[psutil.Process]:
        """Chromium processes of ``slot`` (the browser and its children), found by the marker switch (none when
        the browser is on a browser server)."""
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if slot.marker in cmdline:
                found.append(proc)
        return found

    def browser_pids(self) -> list[int]:
        """Pid of each slot's main browser process (not its renderers), in slot order; for tests and ops."""
        pids = []
        for slot in self._slots:
            main = [p.pid for p in self._processes(slot) if not any(a.startswith("--type=") for a in p.cmdline())]
            pids.extend(main[:1])
        return pids

    @property
    def slots(self) -> list[BrowserSlot]:
        return list(self._slots)

    async def close(self) -> None:
        """Close every browser and Playwright."""
        for slot in self._slots:
            await self._discard(slot)
            proxy, slot.proxy = slot.proxy, None
            if proxy is not None:
                await proxy.close()
        if self._playwright is not None:
            await self._playwright.stop()
            self._playwright = None
