"""A headless Chromium driven over the DevTools protocol, with the standard library only.

``Browser()`` starts the system's ``chromium`` (Debian's package; nothing is
downloaded) with ``--remote-debugging-pipe``: protocol messages are JSON, each ended
by a NUL byte, written to the browser's file descriptor 3 and read from its 4 — no
websocket, no port, no driver binary. One page is attached; ``open(url)`` loads a
``file://`` page and waits for its ``load`` event, ``evaluate(js)`` returns a
JavaScript value, ``screenshot(path)`` writes a PNG, and ``requests`` lists every URL
the page asked for (a self-contained page asks for its own URL only).

``find_chromium()`` returns the executable or None; callers (the tests) decide what
its absence means.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


class BrowserError(RuntimeError):
    """The browser could not start, or a protocol command failed or timed out."""


def find_chromium() -> str | None:
    """The first Chromium executable on ``PATH`` (``$JAXGRAD_CHROMIUM`` overrides)."""
    given = os.environ.get("JAXGRAD_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless Chromium with one page; use as a context manager.

    Args:
      executable: the browser (default ``find_chromium()``).
      width, height: the viewport in CSS pixels (device scale factor 1).
      timeout: seconds to wait for any one protocol answer or page load.
    """

    def __init__(
        self,
        executable: str | None = None,
        *,
        width: int = 1280,
        height: int = 900,
        timeout: float = 30.0,
    ):
        executable = executable or find_chromium()
        if executable is None:
            raise BrowserError(f"no Chromium found on PATH (looked for {', '.join(NAMES)})")
        self.timeout = timeout
        self.requests: list[str] = []
        self._events: list[dict] = []
        self._next_id = 0
        self._buffer = b""
        self._profile = tempfile.mkdtemp(prefix="jaxgrad-chromium-")
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        # The browser expects its pipe on descriptors 3 and 4. A tiny Python shim moves
        # our ends there (from 10 up, so the two moves cannot clobber each other) and
        # execs the browser; preexec_fn would do the same but is unsafe with threads.
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_read, from_browser_write)]
        for fd in (to_browser_read, from_browser_write):
            os.close(fd)
        shim = (
            "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
            "os.execv(sys.argv[3], sys.argv[3:])"
        )
        command = [
            sys.executable,
            "-c",
            shim,
            *map(str, ends),
            executable,
            *FLAGS,
            f"--user-data-dir={self._profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        # the browser's chatter goes to a file: an unread pipe would fill and stall it
        self._log = open(os.path.join(self._profile, "stderr.log"), "wb")
        try:
            self._process = subprocess.Popen(
                command,
                pass_fds=ends,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
            )
        finally:
            for fd in ends:
                os.close(fd)
        try:
            targets = self._call("Target.getTargets")["targetInfos"]
            pages = [t for t in targets if t["type"] == "page"]
            target = (
                pages[0]["targetId"]
                if pages
                else self._call("Target.createTarget", url="about:blank")["targetId"]
            )
            self._session = self._call("Target.attachToTarget", targetId=target, flatten=True)[
                "sessionId"
            ]
            for domain in ("Page", "Runtime", "Network"):
                self.send(f"{domain}.enable")
            self.send(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise

    # -- protocol --------------------------------------------------------------------
    def _write(self, message: dict) -> None:
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser, data) :]

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise BrowserError(f"no answer from the browser within {self.timeout} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError(
                    "the browser closed its pipe; its last words: " + self._last_words()
                )
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _last_words(self) -> str:
        self._log.flush()
        with open(self._log.name, "rb") as log:
            return log.read()[-2000:].decode(errors="replace")

    def _call(self, method: str, session: str | None = None, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._write(message)
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self._event(reply)

    def _event(self, message: dict) -> None:
        if message.get("method") == "Network.requestWillBeSent":
            self.requests.append(message["params"]["request"]["url"])
        self._events.append(message)

    def send(self, method: str, **params) -> dict:
        """One protocol command to the page; its result."""
        return self._call(method, self._session, **params)

    def wait_for(self, method: str) -> dict:
        """The next event ``method`` (earlier ones already received are skipped)."""
        deadline = time.monotonic() + self.timeout
        while True:
            for index, event in enumerate(self._events):
                if event.get("method") == method:
                    del self._events[: index + 1]
                    return event
            self._events.clear()
            self._event(self._read(deadline))

    # -- page ------------------------------------------------------------------------
    def open(self, url: str) -> None:
        """Load ``url`` and wait for its ``load`` event."""
        self._events.clear()
        self.requests.clear()
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"cannot open {url}: {result['errorText']}")
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression (promises awaited); raises on exceptions."""
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript error: {text}")
        return result["result"].get("value")

    def screenshot(self, path: str, *, full_page: bool = True) -> tuple[int, int]:
        """Write a PNG of the page (whole document by default); its ``(width, height)``."""
        width, height = self.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
        )
        params = {"format": "png"}
        if full_page:
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            )
        data = base64.b64decode(self.send("Page.captureScreenshot", **params)["data"])
        with open(path, "wb") as out:
            out.write(data)
        return width, height

    def close(self) -> None:
        process = getattr(self, "_process", None)
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["Browser", "BrowserError", "find_chromium"]
