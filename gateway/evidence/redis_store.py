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
from redis.exceptions import NoScriptError, RedisError

from gateway.evidence.store import SLOT_TTL_S, Found, Remembered, SlotCounts, StoreUnavailable

TIMEOUT_S: Final = 1.0
SEP: Final = "\x1f"

_REMEMBER = """
-- one call per flush, whatever the batches: KEYS are the rows' records in order; ARGV the
-- settings, then per batch its champion flag, model, pair and row count, then that many answers
local ttl, cap, plen, lp = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local at, row = 5, 0
while at <= #ARGV do
  local champion, model, pair, n = ARGV[at] == '1', ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3])
  for i = 1, n do
    local key, answer = KEYS[row + i], ARGV[at + 3 + i]
    local new
    if champion then  -- 3 new fields, or 2 after a challenger's answer: not seen before
      new = redis.call('HSET', key, 'a', answer, 'm', model, 'k', pair) >= 2
    else
      new = redis.call('HSET', key, 'c:' .. pair, answer) == 1
      redis.call('HSETNX', key, 'm', model)
    end
    redis.call('EXPIRE', key, ttl)
    if new then
      local label = redis.call('HMGET', key, 'l', 't')
      if label[1] then  -- labeled before this version answered: pair it now
        local zkey = lp .. pair
        local member = string.sub(key, plen + 1) .. '\\31' .. label[1] .. '\\31' .. answer
        redis.call('ZADD', zkey, label[2], member)
        redis.call('ZREMRANGEBYRANK', zkey, 0, -cap - 1)
        redis.call('EXPIRE', zkey, ttl)
      end
    end
  end
  row, at = row + n, at + 4 + n
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
        self._shas: dict[str, str] = {}

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}:{name}"

    async def _load(self, script: str) -> str:
        sha: str = await self._redis.script_load(script)
        return sha

    def _unavailable(self, exc: RedisError) -> StoreUnavailable:
        return StoreUnavailable(
            f"the shared evidence store ({self.where}) failed: {type(exc).__name__}: {exc}",
            cause="evidence_store",
        )

    async def _run(self, call: Any) -> Any:
        try:
            return await call
        except RedisError as exc:
            raise self._unavailable(exc) from exc

    async def remember(self, batches: Sequence[Remembered]) -> None:
        """Every batch in one EVALSHA (one round trip, no pipeline: redis-py checks a pipeline's
        scripts with SCRIPT EXISTS first, a second round trip per flush)."""
        if not batches:
            return
        record = self._key("p", "")
        keys = [record + i for b in batches for i in b.ids]
        args: list[str | int] = [self.ttl_s, self.cap, len(record), self._key("lp", "")]
        for b in batches:
            args += ("1" if b.champion else "0", b.model, b.pair, len(b.answers), *b.answers)
        await self._evalsha(_REMEMBER, keys, args)

    async def _evalsha(self, script: str, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        """``script`` by its SHA, loaded once (and again after a Redis restart forgot it)."""
        sha = self._shas.get(script)
        try:
            if sha is None:
                sha = self._shas[script] = await self._load(script)
            return await self._redis.evalsha(sha, len(keys), *keys, *args)  # type: ignore[misc]
        except NoScriptError:
            sha = self._shas[script] = await self._run(self._load(script))
            return await self._run(self._redis.evalsha(sha, len(keys), *keys, *args))
        except RedisError as exc:
            raise self._unavailable(exc) from exc

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
        raw = await self._evalsha(_LABEL, keys, args)
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
        for u in updates:  # a few a second (one per slot and pair): no batching needed
            flat = [x for f, v in u.fields.items() if v for x in (f, repr(float(v)))]
            key = self._key("n", f"{u.name}:{u.slot}")
            await self._evalsha(_COUNT, [key], [SLOT_TTL_S, repr(float(u.maximum)), *flat])

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
        return bool(await self._evalsha(_SWAP, [self._key("kv", name)], args))

    async def claim(self, name: str, seconds: float) -> bool:
        ms = max(1, int(seconds * 1000))
        return bool(await self._run(self._redis.set(self._key("kv", name), "1", nx=True, px=ms)))

    async def ping(self) -> None:
        await self._run(self._redis.ping())

    async def close(self) -> None:
        await self._redis.aclose()
