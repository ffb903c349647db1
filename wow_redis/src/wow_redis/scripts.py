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
