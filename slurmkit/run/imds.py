"""AWS IMDSv2: the spot interruption notice, asked with a session token, and the thread that watches for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from .decide import parse_instance_action


# --- AWS IMDSv2 -------------------------------------------------------------------------------------------------


class ImdsError(Exception):
    pass


class Imds:
    """The two IMDSv2 calls a spot watcher needs: PUT a session token, GET spot/instance-action with it."""

    TOKEN_PATH = "/latest/api/token"
    ACTION_PATH = "/latest/meta-data/spot/instance-action"

    def __init__(self, endpoint: str, timeout: float = 2.0, ttl: int = 21600):
        import urllib.request

        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.ttl = ttl
        self._token: str | None = None
        self._token_expiry = 0.0
        # never through a proxy: IMDS is link-local and an http_proxy in the job's environment would break it
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _request(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.endpoint + path, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, ""
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ImdsError(f"{method} {self.endpoint}{path}: {getattr(e, 'reason', e)}") from None

    def token(self) -> str:
        if self._token and time.monotonic() < self._token_expiry:
            return self._token
        status, body = self._request("PUT", self.TOKEN_PATH, {"X-aws-ec2-metadata-token-ttl-seconds": str(self.ttl)})
        if status != 200 or not body.strip():
            raise ImdsError(f"PUT {self.endpoint}{self.TOKEN_PATH}: HTTP {status}")
        self._token = body.strip()
        self._token_expiry = time.monotonic() + max(1, self.ttl - 60)
        return self._token

    def instance_action(self) -> dict | None:
        """The pending spot interruption (parse_instance_action's dict), or None (HTTP 404: no notice)."""
        for attempt in (1, 2):
            status, body = self._request("GET", self.ACTION_PATH, {"X-aws-ec2-metadata-token": self.token()})
            if status == 404:
                return None
            if status == 200:
                return parse_instance_action(body)
            if status == 401 and attempt == 1:  # token expired or revoked: get a new one, once
                self._token = None
                continue
            raise ImdsError(f"GET {self.endpoint}{self.ACTION_PATH}: HTTP {status}")
        return None


class SpotWatcher(threading.Thread):
    """Polls IMDS every `interval` seconds; on a notice stores it and calls `wake()` once."""

    def __init__(self, imds: Imds, interval: float, wake: Callable[[], None], log: Callable[..., None]):
        super().__init__(name="slurmkit-spot-watcher", daemon=True)
        self.imds = imds
        self.interval = interval
        self.wake = wake
        self.log = log
        self.notice: dict | None = None
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                notice = self.imds.instance_action()
                if failing:
                    self.log("imds-ok", endpoint=self.imds.endpoint)
                failing = False
            except ImdsError as e:
                if not failing:  # one line when it starts failing, not one per poll
                    self.log("imds-error", error=str(e))
                failing = True
                notice = None
            if notice is not None:
                self.notice = notice
                self.wake()
                return
            self._stop.wait(self.interval)
