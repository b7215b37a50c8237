"""Trim a torch.profiler trace to the events gapscope's import reads (device ops, runtime and
driver calls, user annotations, ProfilerStep ranges; MTIA events on request) and the args it
reads; top-level keys kept: schemaVersion, deviceProperties, distributedInfo, traceName,
displayTimeUnit, baseTimeNanoseconds. Usage: trim.py IN OUT [--mtia N]"""
import gzip, json, sys
src, out = sys.argv[1], sys.argv[2]
mtia = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == '--mtia' else 0
d = json.load(gzip.open(src) if src.endswith('.gz') else open(src))
KEEP_CATS = {'kernel', 'gpu_memcpy', 'gpu_memset', 'cuda_runtime', 'cuda_driver', 'user_annotation'}
KEEP_ARGS = {'device', 'stream', 'correlation', 'graph id', 'graph node id', 'bytes', 'External id'}
KEEP_TOP = ['schemaVersion', 'deviceProperties', 'distributedInfo', 'traceName', 'displayTimeUnit', 'baseTimeNanoseconds']
events, mtia_kept = [], 0
for e in d['traceEvents']:
    cat, name = e.get('cat'), str(e.get('name', ''))
    if cat in ('mtia_runtime', 'mtia_ccp_events'):
        if mtia_kept >= mtia:
            continue
        mtia_kept += 1
    elif not (cat in KEEP_CATS or (cat == 'cpu_op' and name.startswith('ProfilerStep#'))):
        continue
    e = dict(e)
    if 'args' in e:
        e['args'] = {k: v for k, v in e['args'].items() if k in KEEP_ARGS}
    events.append(e)
top = {k: d[k] for k in KEEP_TOP if k in d}
top['traceEvents'] = events
with gzip.open(out, 'wt', compresslevel=9) as f:
    json.dump(top, f, separators=(',', ':'))
print(out, len(d['traceEvents']), '->', len(events))
