"""Lua scripts: the steps that must happen in one server-side step.

Each script declares every key it touches in ``KEYS`` (so it runs on one server;
on a Redis Cluster the keys of one script must share a hash slot).
"""

from __future__ import annotations

DEAD_LETTER_SCRIPT = """
-- KEYS[1] stream, KEYS[2] dead-letter stream
-- ARGV: group, consumer, entry id, deliveries, reason, dead-letter maxlen (0 = unbounded)
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #pending == 0 or pending[1][2] ~= ARGV[2] then
  return 0
end
local found = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3])
local fields = {}
if #found > 0 then
  fields = found[1][2]
end
local add = {KEYS[2]}
if tonumber(ARGV[6]) > 0 then
  table.insert(add, 'MAXLEN')
  table.insert(add, '~')
  table.insert(add, ARGV[6])
end
table.insert(add, '*')
for i = 1, #fields do
  table.insert(add, fields[i])
end
for _, pair in ipairs({
  {'origin_stream', KEYS[1]}, {'origin_id', ARGV[3]}, {'group', ARGV[1]},
  {'deliveries', ARGV[4]}, {'reason', ARGV[5]}
}) do
  table.insert(add, 'wow_' .. pair[1])
  table.insert(add, pair[2])
end
redis.call('XADD', unpack(add))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
return 1
"""
"""Copy a pending entry this consumer owns to the dead-letter stream and acknowledge it.

Atomic: the entry is either still pending or acknowledged with its copy in
``<stream>.dlq`` (with ``wow_origin_stream``, ``wow_origin_id``, ``wow_group``,
``wow_deliveries`` and ``wow_reason`` fields added). It returns 0 and does nothing when
another consumer owns the entry by now or it was acknowledged meanwhile.
"""

FETCH_CLAIMED_SCRIPT = """
-- KEYS[1] stream; ARGV: group, consumer, XPENDING page size, the claimed ids (ascending)
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local size = tonumber(ARGV[3])
local ids, wanted, missing = {}, {}, 0
for i = 4, #ARGV do
  ids[#ids + 1] = ARGV[i]
  wanted[ARGV[i]] = true
  missing = missing + 1
end
-- the counts of the ids pending in this consumer before the XCLAIM, paged
local before = {}
local low = ids[1]
while missing > 0 do
  local rows = redis.call('XPENDING', stream, group, low, ids[#ids], size, consumer)
  for _, row in ipairs(rows) do
    if wanted[row[1]] and not before[row[1]] then
      before[row[1]] = row[4]
      missing = missing - 1
    end
  end
  if #rows < size then
    break
  end
  low = '(' .. rows[#rows][1]
end
local entries, counts, fetched, trimmed = {}, {}, {}, {}
for first = 1, #ids, 1000 do -- unpack takes a few thousand values at most
  local last = math.min(first + 999, #ids)
  local reply = redis.call('XCLAIM', stream, group, consumer, 0, unpack(ids, first, last))
  for _, entry in ipairs(reply) do
    if entry then -- false: deleted, still pending (Redis 6.2)
      local id = entry[1]
      local count = before[id]
      if count then
        count = count + 1
      else -- taken back from another consumer meanwhile: its count as XCLAIM left it
        count = redis.call('XPENDING', stream, group, id, id, 1)[1][4]
      end
      entries[#entries + 1] = entry
      counts[#counts + 1] = count
      fetched[id] = true
    end
  end
end
for _, id in ipairs(ids) do
  if before[id] and not fetched[id] then
    trimmed[#trimmed + 1] = id
  end
end
return {entries, counts, trimmed}
"""
"""Fetch the entries a recovery claim (``XAUTOCLAIM ... JUSTID``) took, with ``XCLAIM``.

Returns ``{entries, counts, trimmed}``: the entries ``XCLAIM`` returned, each one's
delivery count after it (``XCLAIM`` counts one), and the ids that were pending in this
consumer just before it and that it did not return: deleted from the stream (Redis 7
drops them from the pending list, Redis 6.2 returns nil and keeps them). An id neither
returned nor pending here before was acknowledged meanwhile: in none of the three.
Atomic, so that a deleted id is told from an acknowledged one; the ``XPENDING`` pages
(``size`` rows each, consumer-filtered) go on until every id is found or the range ends.
"""

APPEND_SCRIPT = """
-- KEYS[1] the aggregate's list of streams, KEYS[2] the aggregate type's request ids
-- ARGV: request id, version, stream JSON, where-appended JSON
local original = redis.call('HGET', KEYS[2], ARGV[1])
if original then
  return {'duplicate', original}
end
local current = redis.call('LLEN', KEYS[1])
if current ~= tonumber(ARGV[2]) - 1 then
  return {'conflict', current}
end
redis.call('RPUSH', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
return {'ok'}
"""
"""The event-store append: request-id check, version check and write in one step.

A duplicate request id wins over a version conflict (the caller learns where its
request went). Nothing is written unless both checks pass.
"""

SAVE_SNAPSHOT_SCRIPT = """
-- KEYS[1] the snapshot hash; ARGV: version, snapshot JSON
local held = redis.call('HGET', KEYS[1], 'version')
if held and tonumber(held) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'data', ARGV[2])
return 1
"""
"""Keep a snapshot only when it is newer than the one held."""
