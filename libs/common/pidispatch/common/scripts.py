"""Server-side scripts: each makes one check-and-write atomic, so a crash never half-applies it.

Every script the system runs is a ``Script`` here or, for the worker's own counters, leases and holds, in
``workerscripts``; all are called one way (``luascript``: EVALSHA, EVAL once on NOSCRIPT).
"""

from __future__ import annotations

from itertools import chain

import msgspec

from pidispatch.common.dedup import DEDUP_LUA, remembered
from pidispatch.common.keys import DEDUP_WINDOW_MS, JOB_STATE_TTL_S, Keys
from pidispatch.common.luascript import Call, Script
from pidispatch.common.models import Job, job_to_fields

# ---- receiver and router --------------------------------------------------------------------------

# Append a verified delivery once: remembering it and the XADD happen together or not at all.
# KEYS: its ``Remembered`` keys (common.dedup), events stream. ARGV: its ``Remembered`` args, then field/value
# pairs for the entry. Returns the new entry id, or false when the delivery was seen within the window.
INGEST = Script(DEDUP_LUA + """
local found, where = known()
if found then return false end
keep(where)
return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 5))
""")

# Enqueue a job at most once: exact id first (31 days, common.dedup), then the semantic window. A queued
# job's state hash says where it waits (stream, entry) and which pd:events entry made it, in the same step.
# KEYS: its ``Remembered`` keys, dedup key, job state hash, job stream. ARGV: its ``Remembered`` args, job
# id, dedup ttl (ms), state ttl (s), pd:events entry id ('' for a local job), then the entry's field/value
# pairs as one msgpack array (``enqueue_call``: one argument where redis-py packs ten, each in Python).
# Returns {'queued', entry id} | {'duplicate', job id, its stored eventEntry or ''}
#   | {'deduplicated', surviving job id}.
ENQUEUE = Script(DEDUP_LUA + """
local dedup, job, stream = KEYS[2], KEYS[3], KEYS[4]
local found, where = known()
if found then
  return {'duplicate', ARGV[5], redis.call('HGET', job, 'eventEntry') or ''}
end
local survivor = redis.call('GET', dedup)
if survivor and survivor ~= ARGV[5] then
  return {'deduplicated', survivor}
end
keep(where)
redis.call('SET', dedup, ARGV[5], 'PX', ARGV[6])
local id = redis.call('XADD', stream, '*', unpack(cmsgpack.unpack(ARGV[9])))
redis.call('HSET', job, 'state', 'queued', 'stream', stream, 'entry', id, 'eventEntry', ARGV[8])
redis.call('EXPIRE', job, ARGV[7])
return {'queued', id}
""")


_FIELDS = msgspec.msgpack.Encoder()


def enqueue_call(
    keys: Keys, job: Job, dedup: str, stream: str, event_entry: str, now_ms: int, *, before: bool = False
) -> Call:
    """ENQUEUE for ``job`` onto ``stream``: at most once by its id (kept on the day of ``now_ms``;
    ``before``: also looked for in the dedup layout before) and within the window of the key ``dedup``."""
    known = remembered(keys.jobids, job.id, now_ms, before=before)
    fields = _FIELDS.encode(list(chain.from_iterable(job_to_fields(job).items())))
    return (
        ENQUEUE,
        [*known.keys, dedup, keys.job(job.id), stream],
        [*known.args, job.id, DEDUP_WINDOW_MS, JOB_STATE_TTL_S, event_entry, fields],
    )


# The router's page of decisions and acks at once (one call where a MULTI of two commands a decision was
# the largest part of the router's time): each decision's field in its day/shard bucket, kept to the
# bucket's expiry; the readable lines, cut to the cap; the acks of the finished entries. The page travels
# as one msgpack argument: redis-py packs each argument in Python (a microsecond apiece, six a decision),
# msgspec packs the page in C and the script's cmsgpack reads it.
# KEYS: decision log, events stream, then each decision's bucket. ARGV: group, cap, then the msgpack array
# [rows, lines, acks]: per decision its field, value and bucket expiry (unix s); score/member pairs; ids.
RECORD_PAGE = Script("""
local page = cmsgpack.unpack(ARGV[3])
local rows, lines, acks = page[1], page[2], page[3]
for i = 3, #KEYS do
  local r = 3 * (i - 3)
  redis.call('HSET', KEYS[i], rows[r + 1], rows[r + 2])
  redis.call('EXPIREAT', KEYS[i], rows[r + 3])
end
if #lines > 0 then
  redis.call('ZADD', KEYS[1], unpack(lines))
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[2]) - 1)
end
if #acks > 0 then redis.call('XACK', KEYS[2], ARGV[1], unpack(acks)) end
return 0
""")

# One bounded trim step: cut whole nodes older than ARGV[1], at most ARGV[2] entries, and count them so
# "entries ever added" stays XLEN + trimmed without reading an entry.
# KEYS: stream, its trimmed counter. ARGV: minid, limit. Returns the number of entries removed.
TRIM_STEP = Script("""
local n = redis.call('XTRIM', KEYS[1], 'MINID', '~', ARGV[1], 'LIMIT', ARGV[2])
if n > 0 then redis.call('INCRBY', KEYS[2], n) end
return n
""")

# Mark (entries ever added, last id) when at least ARGV[1] entries came since the newest mark; keep the
# ARGV[2] newest marks. XINFO STREAM is read server-side: no entry crosses the network.
# KEYS: stream, its trimmed counter, its marks. Returns entries ever added, or false without a stream.
TRIM_MARK = Script("""
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local length, last
for i = 1, #info, 2 do
  if info[i] == 'length' then length = info[i + 1] end
  if info[i] == 'last-generated-id' then last = info[i + 1] end
end
local added = length + tonumber(redis.call('GET', KEYS[2]) or '0')
local newest = redis.call('ZREVRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if #newest == 0 or added - tonumber(newest[2]) >= tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[3], added, last)
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(tonumber(ARGV[2]) + 1))
end
return added
""")

# Mark where a consumer group stands in the events stream: (entries read by the group up to its last
# delivered entry, that entry's id), the same scale as TRIM_MARK's "added". The router calls it as it
# reads, so a backlog drained between two trim passes still has marks all along it, and a cut keeping
# PD_EVENTS_MAXLEN exists as soon as the router caught up. Redis 7 reports entries-read; older servers
# (and a counter Redis cannot know) return false and mark nothing.
# KEYS: stream, marks. ARGV: group, spacing, marks kept. Returns the group's entries-read or false.
GROUP_MARK = Script("""
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok then return false end
for _, g in ipairs(groups) do
  local name, read, last
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1]
    elseif g[i] == 'entries-read' then read = g[i + 1]
    elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
  end
  if name == ARGV[1] then
    if type(read) ~= 'number' then return false end
    local below = redis.call('ZREVRANGEBYSCORE', KEYS[2], read, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #below == 0 or read - tonumber(below[2]) >= tonumber(ARGV[2]) then
      redis.call('ZADD', KEYS[2], read, last)
      redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[3]) + 1))
    end
    return read
  end
end
return false
""")

# Move one entry from a dead host's stream, only if it still exists and the group never delivered it.
# The job's state hash, when given, then names the new stream and entry (the entry's ``id`` field names it).
# KEYS: source stream, target stream[, job state hash]. ARGV: group, entry id, state ttl s.
# Returns the new entry id, or false when the entry is gone or was delivered meanwhile.
REROUTE_MOVE = Script("""
local entry = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if #entry == 0 then
  return false
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local em, es = parse(ARGV[2])
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, last
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1] end
    if group[i] == 'last-delivered-id' then last = group[i + 1] end
  end
  if name == ARGV[1] then
    local lm, ls = parse(last)
    if em < lm or (em == lm and es <= ls) then
      return false
    end
  end
end
local id = redis.call('XADD', KEYS[2], '*', unpack(entry[1][2]))
redis.call('XDEL', KEYS[1], ARGV[2])
if KEYS[3] then
  redis.call('HSET', KEYS[3], 'stream', KEYS[2], 'entry', id)
  redis.call('EXPIRE', KEYS[3], ARGV[3])
end
return id
""")

# Whether a delivery is remembered, changing nothing: ``DEDUP_LUA``'s lookup (two GETRANGEs, a GET per old
# day bucket) without its keep. The healer asks it of each delivery in GitHub's log.
# KEYS and ARGV: its ``Remembered``. Returns 1 when remembered in the window, else 0.
REMEMBERED = Script(DEDUP_LUA + """
if known() then return 1 end
return 0
""")

# ---- duties one router holds at a time (a lease) -------------------------------------------------

# Take the lease, or keep it when this holder has it: another holder's live lease is left alone.
# KEYS: lease. ARGV: holder, ttl ms. Returns 1 when held by this holder now, else 0.
LEASE_HOLD = Script("""
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
""")

# Give the lease up, only if this holder still has it. KEYS: lease. ARGV: holder. Returns 1 when dropped.
LEASE_DROP = Script("""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
""")

# ---- host registry --------------------------------------------------------------------------------

# Prune a member only if its row is still absent: a host that beat between our read and this call
# keeps its membership.
# KEYS: host row, hosts set. ARGV: member. Returns 1 when removed, else 0.
HOST_PRUNE = Script("""
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.call('SREM', KEYS[2], ARGV[1])
end
return 0
""")

# ---- delayed jobs ---------------------------------------------------------------------------------

# Move a pending entry into the zset and ack it, atomically. Reads first, writes last: Redis does not roll
# back a script that fails midway, so nothing is written unless every write can happen.
# The state hash's ``stream`` names the zset while the job waits there (it has no entry meanwhile).
# KEYS: source stream, delayed zset, job state hash. ARGV: group, entry id, delay ms, envelope, state ttl s.
# Returns the due time (ms, server clock), or false when the entry is not pending (someone acked it).
DELAYED_SCHEDULE = Script("""
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then
  return false
end
local t = redis.call('TIME')
local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], due, ARGV[4])
redis.call('HSET', KEYS[3], 'state', 'delayed', 'dueAt', string.format('%d', due), 'stream', KEYS[2])
redis.call('HDEL', KEYS[3], 'entry')
redis.call('EXPIRE', KEYS[3], ARGV[5])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return due
""")

# Promote up to ARGV[1] due members. The target stream is named inside each envelope rather than in
# KEYS: fine on the single-node Redis this deployment runs (6.2 allows it), not on a cluster.
# Each promoted job's state hash says queued and names its stream and new entry.
# KEYS: delayed zset, dead stream. ARGV: batch, job state key prefix, state ttl s, dead maxlen, dead reason.
# Returns how many entries were appended.
DELAYED_PROMOTE = Script("""
local first = {id = true, kind = true, repo = true, attempt = true, job = true}
local function entry_args(env)
  if type(env) ~= 'table' or type(env.id) ~= 'string' or type(env.stream) ~= 'string'
     or type(env.fields) ~= 'table' then
    return nil
  end
  local args, rest = {}, {}
  for _, name in ipairs({'id', 'kind', 'repo', 'attempt', 'job'}) do
    local v = env.fields[name]
    if v ~= nil then
      if type(v) ~= 'string' then return nil end
      args[#args + 1] = name
      args[#args + 1] = v
    end
  end
  for name, v in pairs(env.fields) do
    if type(v) ~= 'string' then return nil end
    if not first[name] then rest[#rest + 1] = name end
  end
  table.sort(rest)
  for _, name in ipairs(rest) do
    args[#args + 1] = name
    args[#args + 1] = env.fields[name]
  end
  if #args == 0 then return nil end
  return args
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local moved = 0
for _, member in ipairs(due) do
  if redis.call('ZREM', KEYS[1], member) == 1 then
    local ok, env = pcall(cjson.decode, member)
    local args = ok and entry_args(env) or nil
    local added = false
    if args then
      -- pcall: a stream key of the wrong type must not abort the batch after earlier members moved.
      added = redis.pcall('XADD', env.stream, '*', unpack(args))
    end
    if type(added) == 'string' then
      local job = ARGV[2] .. env.id
      redis.call('HSET', job, 'state', 'queued', 'stream', env.stream, 'entry', added)
      redis.call('HDEL', job, 'dueAt')
      redis.call('EXPIRE', job, ARGV[3])
      moved = moved + 1
    else
      redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'source', KEYS[1], 'entry', '',
                 'reason', ARGV[5], 'deliveries', '0', 'envelope', member)
    end
  end
end
return moved
""")

# Remove one member; when it was there and a state is given, record that state in the same step.
# KEYS: delayed zset, job state hash. ARGV: member, state ('' = leave the hash alone), state ttl s.
DELAYED_REMOVE = Script("""
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[2], 'state', ARGV[2])
  redis.call('HDEL', KEYS[2], 'dueAt')
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
""")

# ---- operator verbs -------------------------------------------------------------------------------

# Shared Lua: a field of an XRANGE row, and the group's last-delivered id (nil when there is no group).
_LUA_HELPERS = """
local function field(row, name)
  local f = row[2]
  for i = 1, #f, 2 do
    if f[i] == name then return f[i + 1] end
  end
  return nil
end
local function last_delivered(stream, group)
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == group then return last end
  end
  return nil
end
"""

# Find a job in one stream and, only if no worker was ever handed it, delete it — atomically, so a worker
# reading the stream at the same moment either got it first ('delivered') or never sees it.
# KEYS: job stream, job state hash. ARGV: group, job id, state ttl s, page size.
# Returns {'removed', entry, attempt} | {'delivered', entry, consumer} | {'done', entry} | {'absent'}.
CANCEL_QUEUED = Script(_LUA_HELPERS + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'absent'} end
local page = tonumber(ARGV[4])
local last = last_delivered(KEYS[1], ARGV[1])
-- Entries after the group's last-delivered id have never been handed to any worker.
local cursor = '(' .. (last or '0-0')
while true do
  local rows = redis.call('XRANGE', KEYS[1], cursor, '+', 'COUNT', page)
  for _, row in ipairs(rows) do
    if field(row, 'id') == ARGV[2] then
      redis.call('XDEL', KEYS[1], row[1])
      redis.call('HSET', KEYS[2], 'state', 'cancelled', 'reason', 'operator-cancel')
      redis.call('EXPIRE', KEYS[2], ARGV[3])
      return {'removed', row[1], field(row, 'attempt') or '1'}
    end
  end
  if #rows < page then break end
  cursor = '(' .. rows[#rows][1]
end
if not last then return {'absent'} end
cursor = '-'
while true do
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], cursor, '+', page)
  for _, p in ipairs(pending) do
    local rows = redis.call('XRANGE', KEYS[1], p[1], p[1])
    if #rows == 1 and field(rows[1], 'id') == ARGV[2] then return {'delivered', p[1], p[2]} end
  end
  if #pending < page then break end
  cursor = '(' .. pending[#pending][1]
end
cursor = '-'
while true do
  local rows = redis.call('XRANGE', KEYS[1], cursor, last, 'COUNT', page)
  for _, row in ipairs(rows) do
    if field(row, 'id') == ARGV[2] then return {'done', row[1]} end
  end
  if #rows < page then break end
  cursor = '(' .. rows[#rows][1]
end
return {'absent'}
""")

# Count one stream's undelivered entries and pending entries server-side (no entry body leaves Redis).
# KEYS: job stream. ARGV: group, page size. Returns {queued, running}.
STREAM_COUNTS = Script(_LUA_HELPERS + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local last = last_delivered(KEYS[1], ARGV[1])
if not last then return {redis.call('XLEN', KEYS[1]), 0} end
local page, queued, cursor = tonumber(ARGV[2]), 0, '(' .. last
while true do
  local rows = redis.call('XRANGE', KEYS[1], cursor, '+', 'COUNT', page)
  queued = queued + #rows
  if #rows < page then break end
  cursor = '(' .. rows[#rows][1]
end
return {queued, redis.call('XPENDING', KEYS[1], ARGV[1])[1]}
""")
