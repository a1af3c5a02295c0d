"""The worker's server-side scripts: hand-offs, budget counters, scoped leases, the run mirror and wait-for
holds. Each makes one check-and-write atomic, so a crash never half-applies it (the stream-side scripts
are in ``scripts``).
"""

from __future__ import annotations

from pidispatch.common.luascript import Script

# Hand a job this worker holds but cannot serve to another host's stream, at most once per delivery:
# the copy is appended and the source entry acked together, and only while that entry is still pending
# for the group (a peer that took it over meanwhile keeps it). The job's state hash then names the copy.
# KEYS: source stream, target stream, job state hash. ARGV: group, entry id, state ttl s, then field/value
# pairs for the copy.
# Returns the new entry id, or false when the entry is no longer pending.
FORWARD = Script("""
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then
  return false
end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], 'stream', KEYS[2], 'entry', id)
redis.call('EXPIRE', KEYS[3], ARGV[3])
return id
""")

# Add ARGV[1] to every counter in KEYS; a counter without a TTL (just created, or re-created by a late
# give-back) gets its window's TTL from ARGV[2..]. A busy counter keeps its TTL, so a busy window does not
# extend itself. Returns the new counts in KEYS order.
# KEYS: budget counters. ARGV: amount, then one ttl (s) per counter.
BUDGET_ADD = Script("""
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call('INCRBY', key, ARGV[1])
  if redis.call('TTL', key) == -1 then
    redis.call('EXPIRE', key, ARGV[i + 1])
  end
end
return out
""")

# Reserve one slot in every scoped window of one attempt, all or none: a full window (count + 1 > cap, or a
# cap <= 0) writes nothing and returns its 1-based position. An existing claim means this attempt already
# reserved (a re-run after a crash): returns -1 and counts nothing again. Otherwise 0.
# KEYS: claim, then counters. ARGV: claim ttl (s), then cap and ttl (s) per counter.
SCOPED_RESERVE = Script("""
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
for i = 2, #KEYS do
  local cap = tonumber(ARGV[2 * i - 2])
  if cap <= 0 or tonumber(redis.call('GET', KEYS[i]) or '0') + 1 > cap then return i - 1 end
end
local taken = {}
for i = 2, #KEYS do
  redis.call('INCR', KEYS[i])
  if redis.call('TTL', KEYS[i]) == -1 then redis.call('EXPIRE', KEYS[i], ARGV[2 * i - 1]) end
  taken[#taken + 1] = KEYS[i]
end
redis.call('SET', KEYS[1], table.concat(taken, '\\n'), 'EX', ARGV[1])
return 0
""")

# Give back an attempt's scoped slots once: only while its claim exists, and never below zero (a window
# that expired meanwhile is not re-created). Returns 1 when this call gave them back.
# KEYS: claim, then the counters the claim names.
SCOPED_RELEASE = Script("""
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
for i = 2, #KEYS do
  if tonumber(redis.call('GET', KEYS[i]) or '0') > 0 then redis.call('DECR', KEYS[i]) end
end
return 1
""")

# Take (or renew: the same call) a lease in every scoped concurrency set of one job, all or none, on the
# server's clock (hosts' clocks differ). Expired leases go first, so a ceiling is never passed even by a
# renewal. Returns 0, or the 1-based position of the first full set.
# KEYS: lease sets. ARGV: job id, lease ttl (ms), then the ceiling per set.
SCOPED_LEASE_TAKE = Script("""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if not redis.call('ZSCORE', key, ARGV[1]) and redis.call('ZCARD', key) >= tonumber(ARGV[2 + i]) then
    return i
  end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', key, ARGV[2])
end
return 0
""")

# Drop index members whose body is gone or unreadable, but only if the body is still what the reader
# saw: a writer that re-mirrored the run between our MGET and this call keeps its member.
# KEYS: index, then one record key per member. ARGV: member, seen body ('' = missing), per member.
RUNS_PRUNE = Script("""
local removed = 0
for i = 2, #KEYS do
  local member, seen = ARGV[2 * i - 3], ARGV[2 * i - 2]
  local body = redis.call('GET', KEYS[i])
  if (body == false and seen == '') or body == seen then
    removed = removed + redis.call('ZREM', KEYS[1], member)
  end
end
return removed
""")


# ---- wait-for holds ---------------------------------------------------------------------------------

# Take (or keep) one target's supersede lease for a job and stamp its hold, together: a holder is live
# while its hold hash exists, so a lease and its hash are never seen apart. The holder's hash is named
# from the lease's value (a key built inside the script: fine on the single-node Redis this runs on).
# KEYS: lease, this job's hold hash, held set. ARGV: job id, lease ttl ms, hash ttl ms, hash key prefix,
# now ms, then field/value pairs for the hash. Returns false when held, else the live holder's job id.
WAIT_HOLD = Script("""
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] and redis.call('EXISTS', ARGV[4] .. holder) == 1 then
  return holder
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSETNX', KEYS[2], 'since', ARGV[5])
if #ARGV > 5 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 6))
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('SADD', KEYS[3], ARGV[1])
return false
""")

# End a job's hold: its hash and index entry go; the lease goes only if it is still this job's; a cleared
# wait leaves the done marker, so a duplicate for the same target arriving later is superseded.
# KEYS: lease, hold hash, held set, done marker. ARGV: job id, done ttl ms (0: no marker).
WAIT_RELEASE = Script("""
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[2])
end
return 1
""")
