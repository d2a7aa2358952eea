"""The shared evidence store on Redis: the chart's Redis (Feast's online store), under its own prefix.

Keys (``{p}`` is the prefix, ``gateway:`` by default):

- ``{p}p:{id}``, a hash for ``ttl_s``: ``m`` the model, ``k`` the champion's pair, ``a`` its
  answer, ``c:{pair}`` a challenger's answer, ``l``/``t`` the label and when it came;
- ``{p}lp:{pair}``, a sorted set for ``ttl_s``: the pair's labeled rows
  (``id␟label␟answer``) scored by label time, the last ``cap``;
- ``{p}pairs:{model}``, a hash: pair -> how its answers read (a few per model, no TTL);
- ``{p}n:{name}:{slot}``, a hash for 25 h: a one-minute slot's count fields and ``max``;
- ``{p}kv:{name}``, a string: the shadow pair, the fallback decision, a lease (its own TTL).

Each write that must be atomic is one Lua script (pairing a label with every answer of its id,
a maximum, compare-and-set), so two replicas taking labels for one id at once accept it once.
Everything a batch writes goes in one pipelined round trip. Memory: a remembered prediction is
one small hash, ~250 bytes with its key (measured, docs/quality.md); run the chart's Redis
with ``maxmemory-policy volatile-ttl`` so that under memory pressure the oldest evidence goes
first and Feast's features (no TTL) never do.

Every call has a short timeout and no retries: an unreachable Redis is ``StoreUnavailable``
at once, so the writer counts the evidence lost and feedback answers 503, never stalls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import urlparse

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gateway.evidence.store import SLOT_TTL_S, Found, Remembered, SlotCounts, StoreUnavailable

TIMEOUT_S: Final = 1.0
SEP: Final = "\x1f"

_REMEMBER = """
local ttl, model, pair, champion = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local zkey, cap, plen = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local field = champion and 'a' or ('c:' .. pair)
for i, key in ipairs(KEYS) do
  local answer = ARGV[7 + i]
  local new = redis.call('HSET', key, field, answer)
  if champion then redis.call('HSET', key, 'm', model, 'k', pair)
  else redis.call('HSETNX', key, 'm', model) end
  redis.call('EXPIRE', key, ttl)
  if new == 1 then
    local label = redis.call('HMGET', key, 'l', 't')
    if label[1] then  -- labeled before this version answered: pair it now
      redis.call('ZADD', zkey, label[2], string.sub(key, plen + 1) .. '\\31' .. label[1] .. '\\31' .. answer)
      redis.call('ZREMRANGEBYRANK', zkey, 0, -cap - 1)
      redis.call('EXPIRE', zkey, ttl)
    end
  end
end
return 1
"""

_LABEL = """
local model, at, lp, cap, ttl, plen = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local out = {}
for i, key in ipairs(KEYS) do
  local label = ARGV[6 + i]
  local rec = redis.call('HMGET', key, 'm', 'l')
  if not rec[1] then out[i] = 'm'
  elseif rec[1] ~= model then out[i] = 'o:' .. rec[1]
  elseif rec[2] then out[i] = 'l:' .. rec[2]
  else
    redis.call('HSET', key, 'l', label, 't', at)
    local id = string.sub(key, plen + 1)
    local all = redis.call('HGETALL', key)
    local fields = {}
    for j = 1, #all, 2 do fields[all[j]] = all[j + 1] end
    for f, answer in pairs(fields) do
      local pair = nil
      if f == 'a' then pair = fields['k'] elseif string.sub(f, 1, 2) == 'c:' then pair = string.sub(f, 3) end
      if pair then
        local zkey = lp .. pair
        redis.call('ZADD', zkey, at, id .. '\\31' .. label .. '\\31' .. answer)
        redis.call('ZREMRANGEBYRANK', zkey, 0, -cap - 1)
        redis.call('EXPIRE', zkey, ttl)
      end
    end
    out[i] = 'a'
  end
end
return out
"""

_COUNT = """
for j = 3, #ARGV, 2 do redis.call('HINCRBYFLOAT', KEYS[1], ARGV[j], ARGV[j + 1]) end
local m = tonumber(ARGV[2])
if m > 0 and m > tonumber(redis.call('HGET', KEYS[1], 'max') or '0') then
  redis.call('HSET', KEYS[1], 'max', ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

_SWAP = """
local cur = redis.call('GET', KEYS[1])
if (ARGV[1] == '0' and not cur) or (ARGV[1] == '1' and cur == ARGV[2]) then
  redis.call('SET', KEYS[1], ARGV[3])
  return 1
end
return 0
"""


def connect_args(url: str) -> dict[str, Any]:
    """``redis://[:password@]host:port[/db]`` (``rediss://`` for TLS), or Feast's connection
    string ``host:port[,password=...][,ssl=true][,db=N]`` (GATEWAY_REDIS_URL's form)."""
    if "://" in url:
        parsed = urlparse(url)
        args: dict[str, Any] = {"host": parsed.hostname or "127.0.0.1", "port": parsed.port or 6379}
        if parsed.password:
            args["password"] = parsed.password
        if parsed.path.strip("/"):
            args["db"] = int(parsed.path.strip("/"))
        args["ssl"] = parsed.scheme == "rediss"
        return args
    address, *options = url.split(",")
    host, _, port = address.rpartition(":")
    args = {"host": host or address, "port": int(port) if port.isdigit() else 6379}
    for option in options:
        key, _, value = option.partition("=")
        if key.strip() == "password":
            args["password"] = value
        elif key.strip() == "ssl":
            args["ssl"] = value.strip().lower() == "true"
        elif key.strip() == "db":
            args["db"] = int(value)
    return args


class RedisEvidence:
    def __init__(self, url: str, ttl_s: int, cap: int, prefix: str = "gateway:") -> None:
        args = connect_args(url)
        self.where = f"redis {args['host']}:{args['port']}"
        self.ttl_s = ttl_s
        self.cap = cap
        self.prefix = prefix
        self._redis = aioredis.Redis(
            **args,
            socket_timeout=TIMEOUT_S,
            socket_connect_timeout=TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),  # fail at once: the writer counts the loss, feedback says 503
            decode_responses=True,
        )
        self._remember = self._redis.register_script(_REMEMBER)
        self._label = self._redis.register_script(_LABEL)
        self._count = self._redis.register_script(_COUNT)
        self._swap = self._redis.register_script(_SWAP)

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}:{name}"

    async def _run(self, call: Any) -> Any:
        try:
            return await call
        except RedisError as exc:
            raise StoreUnavailable(
                f"the shared evidence store ({self.where}) failed: {type(exc).__name__}: {exc}",
                cause="evidence_store",
            ) from exc

    async def remember(self, batches: Sequence[Remembered]) -> None:
        if not batches:
            return
        pipe = self._redis.pipeline(transaction=False)
        record = self._key("p", "")
        for b in batches:
            keys = [record + i for i in b.ids]
            head: list[str | int] = [
                self.ttl_s,
                b.model,
                b.pair,
                int(b.champion),
                self._key("lp", b.pair),
                self.cap,
                len(record),
            ]
            await self._remember(keys=keys, args=[*head, *b.answers], client=pipe)
        await self._run(pipe.execute())

    async def register(self, model: str, pair: str, info: str) -> None:
        await self._run(self._redis.hset(self._key("pairs", model), pair, info))

    async def pairs(self, model: str) -> dict[str, str]:
        found: dict[str, str] = await self._run(self._redis.hgetall(self._key("pairs", model)))
        return found

    async def label(self, model: str, items: Sequence[tuple[str, str]], at: float) -> list[Found]:
        if not items:
            return []
        record = self._key("p", "")
        keys = [record + i for i, _ in items]
        args: list[str | int] = [
            model,
            repr(at),
            self._key("lp", ""),
            self.cap,
            self.ttl_s,
            len(record),
            *(v for _, v in items),
        ]
        raw = await self._run(self._label(keys=keys, args=args))
        out = []
        for state in raw:
            if state == "a":
                out.append(Found("accepted"))
            elif state == "m":
                out.append(Found("missing"))
            elif state.startswith("o:"):
                out.append(Found("other", state[2:]))
            else:
                out.append(Found("labeled", state[2:]))
        return out

    async def labeled(self, pair: str, since: float) -> list[tuple[str, str]]:
        members = await self._run(self._redis.zrangebyscore(self._key("lp", pair), since, "+inf"))
        out = []
        for member in members:
            _, label, answer = member.split(SEP, 2)
            out.append((label, answer))
        return out

    async def add_counts(self, updates: Sequence[SlotCounts]) -> None:
        if not updates:
            return
        pipe = self._redis.pipeline(transaction=False)
        for u in updates:
            flat = [x for f, v in u.fields.items() if v for x in (f, repr(float(v)))]
            key = self._key("n", f"{u.name}:{u.slot}")
            await self._count(keys=[key], args=[SLOT_TTL_S, repr(float(u.maximum)), *flat], client=pipe)
        await self._run(pipe.execute())

    async def counts(self, name: str, first: int, last: int) -> dict[int, tuple[dict[int, float], float]]:
        slots = list(range(first, last + 1))
        pipe = self._redis.pipeline(transaction=False)
        for slot in slots:
            pipe.hgetall(self._key("n", f"{name}:{slot}"))
        rows = await self._run(pipe.execute())
        out = {}
        for slot, row in zip(slots, rows, strict=True):
            if row:
                maximum = float(row.pop("max", 0.0))
                out[slot] = ({int(f): float(v) for f, v in row.items()}, maximum)
        return out

    async def get(self, name: str) -> str | None:
        value: str | None = await self._run(self._redis.get(self._key("kv", name)))
        return value

    async def put(self, name: str, value: str) -> None:
        await self._run(self._redis.set(self._key("kv", name), value))

    async def swap(self, name: str, expect: str | None, value: str) -> bool:
        args = ["0", "", value] if expect is None else ["1", expect, value]
        return bool(await self._run(self._swap(keys=[self._key("kv", name)], args=args)))

    async def claim(self, name: str, seconds: float) -> bool:
        ms = max(1, int(seconds * 1000))
        return bool(await self._run(self._redis.set(self._key("kv", name), "1", nx=True, px=ms)))

    async def ping(self) -> None:
        await self._run(self._redis.ping())

    async def close(self) -> None:
        await self._redis.aclose()
