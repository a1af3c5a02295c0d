"""Server-side scripts: each makes one check-and-write atomic, so a crash never half-applies it."""

from __future__ import annotations

# Append a verified delivery once: the dedup key and the XADD happen together or not at all.
# KEYS: seen key, events stream. ARGV: seen ttl (s), then field/value pairs for the entry.
# Returns the new entry id, or false when the delivery was seen before.
INGEST = """
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
end
return false
"""

# Enqueue a job at most once: exact id first (31 days), then the semantic window.
# KEYS: jobid key, dedup key, job stream. ARGV: job id, jobid ttl (s), dedup ttl (ms), field/value pairs.
# Returns {'queued', entry id} | {'duplicate', job id} | {'deduplicated', surviving job id}.
ENQUEUE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'duplicate', ARGV[1]}
end
local survivor = redis.call('GET', KEYS[2])
if survivor and survivor ~= ARGV[1] then
  return {'deduplicated', survivor}
end
redis.call('SET', KEYS[1], '1', 'EX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return {'queued', redis.call('XADD', KEYS[3], '*', unpack(ARGV, 4))}
"""

# The id of the ARGV[1]-th oldest entry, computed server-side so no entry body crosses the network.
NTH_OLDEST_ID = """
local r = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', ARGV[1])
if #r == 0 then return false end
return r[#r][1]
"""

# Hand a job this worker holds but cannot serve to another host's stream, at most once per delivery:
# the copy is appended and the source entry acked together, and only while that entry is still pending
# for the group (a peer that took it over meanwhile keeps it).
# KEYS: source stream, target stream. ARGV: group, entry id, then field/value pairs for the copy.
# Returns the new entry id, or false when the entry is no longer pending.
FORWARD = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then
  return false
end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return id
"""
