#![forbid(unsafe_code)]
//! The TrackEvent protobuf encoding of [`super::write_perfetto_trace`]: a `Trace` message
//! written packet by packet (each `TracePacket` is field 1 of `Trace`, so concatenated packets
//! are a valid trace and nothing is held back). One packet sequence; names, categories,
//! annotation keys and the trace's strings are interned (sent once, then named by id).
//!
//! Per cell: a process track (`ProcessDescriptor`), a child track per layout track in display
//! order, and a counter track of the idle time per step. Slices are `TYPE_SLICE_BEGIN` /
//! `TYPE_SLICE_END` pairs, written in time order within the cell (an end before a begin at the
//! same instant, so touching slices on one track nest correctly).

use super::wire::{Message, put_varint};
use super::{Annotate, CellLayout, Ev, Payload, SliceName};
use crate::trace::{GraphNode, HostRanges, Trace};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Write};

/// Field numbers of `perfetto_trace.proto` (perfetto.protos).
mod field {
    // Trace
    pub const PACKET: u32 = 1;
    // TracePacket
    pub const TIMESTAMP: u32 = 8;
    pub const SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    // TrackDescriptor
    pub const UUID: u32 = 1;
    pub const NAME: u32 = 2;
    pub const PROCESS: u32 = 3;
    pub const PARENT_UUID: u32 = 5;
    pub const COUNTER: u32 = 8;
    pub const CHILD_ORDERING: u32 = 11;
    pub const SIBLING_ORDER_RANK: u32 = 12;
    // ProcessDescriptor
    pub const PID: u32 = 1;
    pub const PROCESS_NAME: u32 = 6;
    // CounterDescriptor
    pub const UNIT: u32 = 3;
    // TrackEvent
    pub const CATEGORY_IIDS: u32 = 3;
    pub const DEBUG_ANNOTATIONS: u32 = 4;
    pub const TYPE: u32 = 9;
    pub const NAME_IID: u32 = 10;
    pub const TRACK_UUID: u32 = 11;
    pub const COUNTER_VALUE: u32 = 30;
    pub const FLOW_IDS: u32 = 47;
    pub const TERMINATING_FLOW_IDS: u32 = 48;
    // DebugAnnotation
    pub const ANNOTATION_NAME_IID: u32 = 1;
    pub const BOOL_VALUE: u32 = 2;
    pub const UINT_VALUE: u32 = 3;
    #[cfg(test)]
    pub const STRING_VALUE: u32 = 6;
    pub const STRING_VALUE_IID: u32 = 17;
    // InternedData
    pub const EVENT_CATEGORIES: u32 = 1;
    pub const EVENT_NAMES: u32 = 2;
    pub const DEBUG_ANNOTATION_NAMES: u32 = 3;
    pub const DEBUG_ANNOTATION_STRING_VALUES: u32 = 29;
}

const SLICE_BEGIN: u64 = 1;
const SLICE_END: u64 = 2;
const COUNTER: u64 = 4;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
/// `TrackDescriptor.ChildTracksOrdering.EXPLICIT`: children by `sibling_order_rank`.
const EXPLICIT: u64 = 3;
/// `CounterDescriptor.Unit.UNIT_TIME_NS`.
const UNIT_TIME_NS: u64 = 1;
/// The one packet sequence of the file.
const SEQUENCE: u64 = 1;

/// Strings sent once in `InternedData`, then named by id.
struct Interner {
    /// The `InternedData` field its entries go to.
    field: u32,
    ids: FxHashMap<Box<str>, u64>,
    /// The id of each string of the current cell's trace, once seen (hashes each once).
    trace_ids: Vec<Option<u64>>,
}

impl Interner {
    fn new(field: u32) -> Interner {
        Interner {
            field,
            ids: FxHashMap::default(),
            trace_ids: Vec::new(),
        }
    }

    fn for_trace(&mut self, trace: Option<&Trace>) {
        self.trace_ids.clear();
        self.trace_ids
            .resize(trace.map_or(0, |t| t.strings.len()), None);
    }

    /// The id of `s`; a new one is added to `interned` (every interned type has the same
    /// shape: `iid = 1`, the string = 2).
    fn text(&mut self, s: &str, interned: &mut Message) -> u64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.ids.len() as u64 + 1;
        self.ids.insert(s.into(), id);
        interned.nested(self.field, |m| {
            m.uint(1, id);
            m.str(2, s);
        });
        id
    }

    fn trace_str(&mut self, trace: Option<&Trace>, id: u32, interned: &mut Message) -> u64 {
        if let Some(&Some(iid)) = self.trace_ids.get(id as usize) {
            return iid;
        }
        let iid = self.text(trace.map_or("?", |t| t.str(id)), interned);
        if let Some(slot) = self.trace_ids.get_mut(id as usize) {
            *slot = Some(iid);
        }
        iid
    }
}

/// What a trace says about where an op came from: its graph node, and the library-call ranges
/// around eager launches.
pub(super) struct Provenance<'t> {
    trace: Option<&'t Trace>,
    nodes: FxHashMap<u64, &'t GraphNode>,
    library_calls: Option<HostRanges>,
}

impl<'t> Provenance<'t> {
    pub(super) fn new(trace: Option<&'t Trace>) -> Provenance<'t> {
        Provenance {
            trace,
            nodes: trace
                .map(|t| t.graph.nodes.iter().map(|n| (n.id, n)).collect())
                .unwrap_or_default(),
            library_calls: trace.map(|t| HostRanges::library_calls(t, true)),
        }
    }

    /// The program's own Python frame that created `node`, when the recording read its stack.
    fn created_in(&self, node: &GraphNode) -> Option<String> {
        let stack = self.trace?.str(node.python_stack?);
        crate::analysis::provenance::creating_code(stack)
    }

    /// The library call open on `thread` at `at` (an eager launch's).
    fn library_call(&self, thread: u32, at: u64) -> Option<u32> {
        self.library_calls.as_ref()?.innermost(thread, at)
    }
}

/// The protobuf trace being written.
pub(super) struct PacketWriter<'w> {
    w: &'w mut dyn Write,
    packet: Message,
    event: Message,
    interned: Message,
    started: bool,
    next_uuid: u64,
    next_flow: u64,
    names: Interner,
    categories: Interner,
    keys: Interner,
    values: Interner,
    /// The value iid of each hex number written (node ids).
    hex_ids: FxHashMap<u64, u64>,
    header: Vec<u8>,
}

impl<'w> PacketWriter<'w> {
    pub(super) fn new(w: &'w mut dyn Write) -> PacketWriter<'w> {
        PacketWriter {
            w,
            packet: Message::new(),
            event: Message::new(),
            interned: Message::new(),
            started: false,
            next_uuid: 1,
            next_flow: 1,
            names: Interner::new(field::EVENT_NAMES),
            categories: Interner::new(field::EVENT_CATEGORIES),
            keys: Interner::new(field::DEBUG_ANNOTATION_NAMES),
            values: Interner::new(field::DEBUG_ANNOTATION_STRING_VALUES),
            hex_ids: FxHashMap::default(),
            header: Vec::with_capacity(16),
        }
    }

    fn uuid(&mut self) -> u64 {
        self.next_uuid += 1;
        self.next_uuid - 1
    }

    /// Writes one packet: the pending interned data, `timestamp`, and the body in
    /// `self.event` as field `body_field` (written straight from that buffer).
    fn emit(&mut self, timestamp: Option<u64>, body_field: u32) -> io::Result<()> {
        let p = &mut self.packet;
        p.clear();
        let uses_interning = !self.interned.is_empty() || body_field == field::TRACK_EVENT;
        if !self.interned.is_empty() {
            p.len_delimited(field::INTERNED_DATA, self.interned.bytes());
            self.interned.clear();
        }
        if let Some(ts) = timestamp {
            p.uint(field::TIMESTAMP, ts);
        }
        p.uint(field::SEQUENCE_ID, SEQUENCE);
        let mut flags = 0;
        if !self.started {
            flags |= SEQ_INCREMENTAL_STATE_CLEARED;
            self.started = true;
        }
        if uses_interning {
            flags |= SEQ_NEEDS_INCREMENTAL_STATE;
        }
        if flags != 0 {
            p.uint(field::SEQUENCE_FLAGS, flags);
        }
        p.len_header(body_field, self.event.bytes().len());
        self.header.clear();
        put_varint(
            &mut self.header,
            u64::from(field::PACKET) << 3 | 2, // length-delimited
        );
        put_varint(
            &mut self.header,
            (p.bytes().len() + self.event.bytes().len()) as u64,
        );
        self.w.write_all(&self.header)?;
        self.w.write_all(p.bytes())?;
        self.w.write_all(self.event.bytes())?;
        self.event.clear();
        Ok(())
    }

    /// A track descriptor, under a fresh uuid, filled by `fill`; returns the uuid.
    fn track(&mut self, fill: impl FnOnce(&mut Message)) -> io::Result<u64> {
        let uuid = self.uuid();
        self.event.uint(field::UUID, uuid);
        fill(&mut self.event);
        self.emit(None, field::TRACK_DESCRIPTOR)?;
        Ok(uuid)
    }

    /// A process track named `name`; its children keep the order they are given in.
    pub(super) fn process(&mut self, pid: u64, name: &str) -> io::Result<u64> {
        self.track(|d| {
            d.nested(field::PROCESS, |p| {
                p.uint(field::PID, pid);
                p.str(field::PROCESS_NAME, name);
            });
            d.uint(field::CHILD_ORDERING, EXPLICIT);
        })
    }

    /// Starts a track event of `kind` on `track` (the packet is written by [`Self::emit`]).
    fn event_header(&mut self, kind: u64, track: u64) {
        self.event.uint(field::TYPE, kind);
        self.event.uint(field::TRACK_UUID, track);
    }

    /// The tracks, slices, flows and idle counter of one laid-out cell, under `process`.
    pub(super) fn cell(
        &mut self,
        process: u64,
        l: &CellLayout<'_>,
        prov: &Provenance<'_>,
    ) -> io::Result<()> {
        self.names.for_trace(l.trace);
        self.values.for_trace(l.trace);
        // A comparison draws one step a side: a counter of one value says nothing.
        let idle = match l.compared {
            Some(_) => None,
            None => Some(self.track(|d| {
                d.uint(field::PARENT_UUID, process);
                d.str(field::NAME, "idle per step");
                d.nested(field::COUNTER, |c| c.uint(field::UNIT, UNIT_TIME_NS));
                d.uint(field::SIBLING_ORDER_RANK, 0);
            })?),
        };
        // Track uuids by tid (tids count from 1, in display order).
        let mut uuids = Vec::with_capacity(l.tracks.len());
        for (tid, name) in &l.tracks {
            uuids.push(self.track(|d| {
                d.uint(field::PARENT_UUID, process);
                d.str(field::NAME, name);
                d.uint(field::SIBLING_ORDER_RANK, *tid + l.rank_offset);
            })?);
        }
        let track_of = |i: usize| uuids[(l.tids[i] - 1) as usize];
        let flows = self.flows(l);
        // The gap each op ended, for its cause.
        let mut gap_before: FxHashMap<usize, (usize, usize)> = FxHashMap::default();
        for (si, s) in l.cell.steps.iter().enumerate() {
            for (gi, g) in s.gaps.iter().enumerate() {
                if !g.is_empty() {
                    gap_before.insert(g.after, (si, gi));
                }
            }
        }
        // Ends waiting to be written: (time, order, track).
        let mut ends: BinaryHeap<Reverse<(u64, u32, u64)>> = BinaryHeap::new();
        for &i in &l.order {
            let e = &l.evs[i as usize];
            let ts = l.shift.apply(e.start);
            self.ends_until(&mut ends, Some(ts))?;
            let track = track_of(i as usize);
            self.event_header(SLICE_BEGIN, track);
            let (name, cat) = l.name(e);
            self.name_and_category(l.trace, &name, cat);
            for &id in flows.started_by(i as usize) {
                self.event.fixed64(field::FLOW_IDS, id);
            }
            if let (Payload::Op(oi, _), Some(c)) = (e.payload, &l.compared)
                && let Some(&id) = c.flows.get(&oi)
            {
                self.event.fixed64(field::FLOW_IDS, id);
            }
            if flows.ends[i as usize] != 0 {
                self.event
                    .fixed64(field::TERMINATING_FLOW_IDS, flows.ends[i as usize]);
            }
            let mut args = ProtoArgs {
                event: &mut self.event,
                interned: &mut self.interned,
                keys: &mut self.keys,
                values: &mut self.values,
                hex_ids: &mut self.hex_ids,
                trace: l.trace,
            };
            l.annotate(e, &mut args);
            provenance(l, e, prov, &gap_before, &mut args);
            self.emit(Some(ts), field::TRACK_EVENT)?;
            if let (Payload::Step(si), Some(idle)) = (e.payload, idle) {
                self.event_header(COUNTER, idle);
                self.event
                    .int(field::COUNTER_VALUE, l.cell.steps[si].idle as i64);
                self.emit(Some(ts), field::TRACK_EVENT)?;
            }
            ends.push(Reverse((l.shift.apply(e.end), i, track)));
        }
        self.ends_until(&mut ends, None)
    }

    /// Writes the pending slice ends up to `until` (all of them for `None`).
    fn ends_until(
        &mut self,
        ends: &mut BinaryHeap<Reverse<(u64, u32, u64)>>,
        until: Option<u64>,
    ) -> io::Result<()> {
        while let Some(&Reverse((at, _, track))) = ends.peek() {
            if until.is_some_and(|u| at > u) {
                break;
            }
            ends.pop();
            self.event_header(SLICE_END, track);
            self.emit(Some(at), field::TRACK_EVENT)?;
        }
        Ok(())
    }

    fn name_and_category(&mut self, trace: Option<&Trace>, name: &SliceName, cat: &str) {
        let name_iid = match name {
            SliceName::Text(t) => self.names.text(t, &mut self.interned),
            SliceName::TraceStr(id) => self.names.trace_str(trace, *id, &mut self.interned),
        };
        let cat_iid = self.categories.text(cat, &mut self.interned);
        self.event.uint(field::NAME_IID, name_iid);
        self.event.uint(field::CATEGORY_IIDS, cat_iid);
    }

    /// One flow per op that has a launch call in the cell: the call starts it, the op ends it.
    fn flows(&mut self, l: &CellLayout<'_>) -> Flows {
        let mut call_event: FxHashMap<u32, u32> = FxHashMap::default();
        for (i, e) in l.evs.iter().enumerate() {
            if let Payload::Api(corr, _) = e.payload {
                call_event.insert(corr, i as u32);
            }
        }
        let mut flows = Flows {
            ends: vec![0; l.evs.len()],
            starts: Vec::new(),
            first: vec![0; l.evs.len() + 1],
        };
        let mut pairs: Vec<(u32, u64)> = Vec::new(); // (call event, flow id)
        for &i in &l.order {
            if let Payload::Op(oi, _) = l.evs[i as usize].payload
                && let Some(&call) = call_event.get(&l.ops[oi].corr)
            {
                let id = self.next_flow;
                self.next_flow += 1;
                pairs.push((call, id));
                flows.ends[i as usize] = id;
            }
        }
        // Grouped by call (ids in time order within a call): starts[first[c]..first[c + 1]].
        pairs.sort_unstable();
        for &(call, _) in &pairs {
            flows.first[call as usize + 1] += 1;
        }
        for c in 0..l.evs.len() {
            flows.first[c + 1] += flows.first[c];
        }
        flows.starts = pairs.into_iter().map(|(_, id)| id).collect();
        flows
    }

    /// `n` flow ids no other flow of the file takes; returns the first.
    pub(super) fn reserve_flows(&mut self, n: u64) -> u64 {
        let first = self.next_flow;
        self.next_flow += n;
        first
    }

    pub(super) fn finish(self) -> io::Result<()> {
        self.w.flush()
    }
}

/// The flow ids of one cell, by event index (flow ids count from 1).
struct Flows {
    /// The flow an op event ends (0: none).
    ends: Vec<u64>,
    /// The flows each launch call starts: `starts[first[e]..first[e + 1]]` for event `e`.
    starts: Vec<u64>,
    first: Vec<u32>,
}

impl Flows {
    fn started_by(&self, event: usize) -> &[u64] {
        &self.starts[self.first[event] as usize..self.first[event + 1] as usize]
    }
}

/// What only the protobuf carries: an op's stream, graph node and provenance, and the cause of
/// the gap it ended; a launch call's library call.
fn provenance(
    l: &CellLayout<'_>,
    e: &Ev,
    prov: &Provenance<'_>,
    gap_before: &FxHashMap<usize, (usize, usize)>,
    a: &mut dyn Annotate,
) {
    let library_call_of_launch = |corr: u32| {
        let call = l.apis.get(&corr)?;
        prov.library_call(call.thread, call.start)
    };
    match e.payload {
        Payload::Op(oi, _) => {
            let op = &l.ops[oi];
            a.num("device", u64::from(op.device));
            a.num("stream", u64::from(op.stream));
            if op.graph != 0 {
                if let Some(node) = prov.nodes.get(&op.node) {
                    a.str("node_type", &crate::analysis::steps::node_type_label(node));
                    if let Some(api) = node.created_by {
                        a.trace_str("created_by", api);
                    }
                    if let Some(lib) = node.library_call {
                        a.trace_str("library_call", lib);
                    }
                    if let Some(code) = prov.created_in(node) {
                        a.str("created_in", &code);
                    }
                    if let Some(template) = node.cloned_from {
                        a.hex("cloned_from", template);
                    }
                }
            } else if let Some(lib) = library_call_of_launch(op.corr) {
                a.trace_str("library_call", lib);
            }
            if let Some(&(si, gi)) = gap_before.get(&oi) {
                let g = &l.cell.steps[si].gaps[gi];
                a.str(
                    "gap_before_cause",
                    &super::super::cause_kind_id(g.cause.kind()),
                );
                a.str("gap_before", &g.cause.label());
                a.num("gap_before_ns", g.len());
            }
        }
        Payload::Api(corr, _) => {
            if let Some(lib) = library_call_of_launch(corr) {
                a.trace_str("library_call", lib);
            }
        }
        Payload::Step(_) | Payload::Gap(..) | Payload::Sample(_) => {}
    }
}

/// Debug annotations of the event being written.
struct ProtoArgs<'b, 't> {
    event: &'b mut Message,
    interned: &'b mut Message,
    keys: &'b mut Interner,
    values: &'b mut Interner,
    hex_ids: &'b mut FxHashMap<u64, u64>,
    trace: Option<&'t Trace>,
}

impl ProtoArgs<'_, '_> {
    fn annotation(&mut self, key: &'static str, value: impl FnOnce(&mut Message)) {
        let key = self.keys.text(key, self.interned);
        self.event.nested(field::DEBUG_ANNOTATIONS, |m| {
            m.uint(field::ANNOTATION_NAME_IID, key);
            value(m);
        });
    }
}

impl Annotate for ProtoArgs<'_, '_> {
    fn num(&mut self, key: &'static str, v: u64) {
        self.annotation(key, |m| m.uint(field::UINT_VALUE, v));
    }
    fn bool(&mut self, key: &'static str, v: bool) {
        self.annotation(key, |m| m.bool(field::BOOL_VALUE, v));
    }
    /// Interned too: causes, regimes and node ids repeat on every step.
    fn str(&mut self, key: &'static str, v: &str) {
        let iid = self.values.text(v, self.interned);
        self.annotation(key, |m| m.uint(field::STRING_VALUE_IID, iid));
    }
    fn hex(&mut self, key: &'static str, v: u64) {
        // Formatted and interned once per value (every replay repeats its graph's node ids).
        let iid = match self.hex_ids.get(&v) {
            Some(&iid) => iid,
            None => {
                let iid = self.values.text(&format!("{v:#x}"), self.interned);
                self.hex_ids.insert(v, iid);
                iid
            }
        };
        self.annotation(key, |m| m.uint(field::STRING_VALUE_IID, iid));
    }
    fn trace_str(&mut self, key: &'static str, id: u32) {
        let iid = self.values.trace_str(self.trace, id, self.interned);
        self.annotation(key, |m| m.uint(field::STRING_VALUE_IID, iid));
    }
    fn null(&mut self, _key: &'static str) {}
}

#[cfg(test)]
mod tests {
    use super::super::tests::{names, ns};
    use super::super::wire::{Value, fields};
    use super::super::{PerfettoOptions, chrome_trace, write_perfetto_trace};
    use super::{COUNTER, SEQ_INCREMENTAL_STATE_CLEARED, SEQUENCE, SLICE_BEGIN, SLICE_END, field};
    use crate::report::fixtures::{self, GRAPHED_AT};
    use crate::trace::{GraphNode, NodeType, Trace};
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    /// A track as its descriptor declares it.
    #[derive(Debug, Default)]
    struct TrackInfo {
        parent: Option<u64>,
        name: String,
        process: Option<(u64, String)>,
        counter: bool,
        rank: Option<u64>,
    }

    /// A track event with its interned names resolved.
    #[derive(Debug, Default, Clone)]
    struct Event {
        ts: u64,
        kind: u64,
        track: u64,
        name: String,
        category: String,
        args: BTreeMap<String, String>,
        flows: Vec<u64>,
        terminating: Vec<u64>,
        counter: Option<i64>,
    }

    #[derive(Debug, Default)]
    struct Decoded {
        tracks: BTreeMap<u64, TrackInfo>,
        events: Vec<Event>,
    }

    fn each(buf: &[u8]) -> Vec<(u32, Value<'_>)> {
        fields(buf).collect::<Result<_, _>>().expect("well-formed")
    }

    /// Reads the whole trace as the Perfetto importer would: packets in order, interned data
    /// applied per packet before its event.
    fn decode(bytes: &[u8]) -> Decoded {
        let mut out = Decoded::default();
        // Interned tables: (InternedData field, iid) -> string.
        let mut interned: HashMap<(u32, u64), String> = HashMap::new();
        let mut cleared = false;
        for (f, packet) in each(bytes) {
            assert_eq!(f, field::PACKET, "a Trace holds packets only");
            let packet = packet.as_bytes().unwrap();
            let mut ts = None;
            for (f, v) in each(packet) {
                match f {
                    field::SEQUENCE_FLAGS => {
                        cleared |= v.as_u64().unwrap() & SEQ_INCREMENTAL_STATE_CLEARED != 0;
                    }
                    field::SEQUENCE_ID => assert_eq!(v.as_u64(), Some(SEQUENCE)),
                    field::TIMESTAMP => ts = v.as_u64(),
                    field::INTERNED_DATA => {
                        assert!(cleared, "interned data before the state was cleared");
                        for (kind, entry) in each(v.as_bytes().unwrap()) {
                            let e = each(entry.as_bytes().unwrap());
                            let iid = e[0].1.as_u64().unwrap();
                            let s = e[1].1.as_str().unwrap().to_owned();
                            assert!(
                                interned.insert((kind, iid), s).is_none(),
                                "iid {iid} of {kind} sent twice"
                            );
                        }
                    }
                    _ => {}
                }
            }
            for (f, v) in each(packet) {
                match f {
                    field::TRACK_DESCRIPTOR => {
                        let mut t = TrackInfo::default();
                        let mut uuid = None;
                        for (f, v) in each(v.as_bytes().unwrap()) {
                            match f {
                                field::UUID => uuid = v.as_u64(),
                                field::PARENT_UUID => t.parent = v.as_u64(),
                                field::NAME => t.name = v.as_str().unwrap().to_owned(),
                                field::COUNTER => t.counter = true,
                                field::SIBLING_ORDER_RANK => t.rank = v.as_u64(),
                                field::PROCESS => {
                                    let p = each(v.as_bytes().unwrap());
                                    let pid = p.iter().find(|x| x.0 == field::PID).unwrap();
                                    let name =
                                        p.iter().find(|x| x.0 == field::PROCESS_NAME).unwrap();
                                    t.process = Some((
                                        pid.1.as_u64().unwrap(),
                                        name.1.as_str().unwrap().to_owned(),
                                    ));
                                }
                                _ => {}
                            }
                        }
                        assert!(out.tracks.insert(uuid.unwrap(), t).is_none());
                    }
                    field::TRACK_EVENT => {
                        let mut e = Event {
                            ts: ts.expect("a timestamp"),
                            ..Event::default()
                        };
                        let lookup = |kind: u32, v: Value<'_>| {
                            interned[&(kind, v.as_u64().unwrap())].clone()
                        };
                        for (f, v) in each(v.as_bytes().unwrap()) {
                            match f {
                                field::TYPE => e.kind = v.as_u64().unwrap(),
                                field::TRACK_UUID => e.track = v.as_u64().unwrap(),
                                field::NAME_IID => e.name = lookup(field::EVENT_NAMES, v),
                                field::CATEGORY_IIDS => {
                                    e.category = lookup(field::EVENT_CATEGORIES, v)
                                }
                                field::FLOW_IDS => e.flows.push(v.as_u64().unwrap()),
                                field::TERMINATING_FLOW_IDS => {
                                    e.terminating.push(v.as_u64().unwrap())
                                }
                                field::COUNTER_VALUE => {
                                    e.counter = Some(v.as_u64().unwrap() as i64)
                                }
                                field::DEBUG_ANNOTATIONS => {
                                    let (mut key, mut value) = (String::new(), String::new());
                                    for (f, v) in each(v.as_bytes().unwrap()) {
                                        match f {
                                            field::ANNOTATION_NAME_IID => {
                                                key = lookup(field::DEBUG_ANNOTATION_NAMES, v)
                                            }
                                            field::STRING_VALUE => {
                                                value = v.as_str().unwrap().to_owned()
                                            }
                                            field::STRING_VALUE_IID => {
                                                value =
                                                    lookup(field::DEBUG_ANNOTATION_STRING_VALUES, v)
                                            }
                                            field::BOOL_VALUE | field::UINT_VALUE => {
                                                value = v.as_u64().unwrap().to_string()
                                            }
                                            other => panic!("annotation field {other}"),
                                        }
                                    }
                                    e.args.insert(key, value);
                                }
                                other => panic!("track event field {other}"),
                            }
                        }
                        assert!(out.tracks.contains_key(&e.track), "track declared first");
                        out.events.push(e);
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// Slices as (track, begin event, end ts), checked to nest on every track: events sorted by
    /// time (file order on ties, as Perfetto's sorter keeps it), a stack per track.
    fn slices(d: &Decoded) -> Vec<(u64, Event, u64)> {
        let mut order: Vec<usize> = (0..d.events.len()).collect();
        order.sort_by_key(|&i| (d.events[i].ts, i));
        let mut open: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut out = Vec::new();
        for i in order {
            let e = &d.events[i];
            match e.kind {
                SLICE_BEGIN => {
                    let stack = open.entry(e.track).or_default();
                    assert!(stack.is_empty(), "overlap on track {}: {e:?}", e.track);
                    stack.push(i);
                }
                SLICE_END => {
                    let b = open
                        .get_mut(&e.track)
                        .and_then(Vec::pop)
                        .expect("an open slice");
                    out.push((e.track, d.events[b].clone(), e.ts));
                }
                COUNTER => assert!(d.tracks[&e.track].counter),
                k => panic!("event type {k}"),
            }
        }
        assert!(open.values().all(Vec::is_empty), "every slice ends");
        out
    }

    fn protobuf(
        traces: &[Trace],
        a: &crate::analysis::Analysis,
        opts: &PerfettoOptions,
    ) -> Vec<u8> {
        let mut buf = Vec::new();
        write_perfetto_trace(&mut buf, traces, a, opts).unwrap();
        buf
    }

    fn process_of(d: &Decoded, track: u64) -> &str {
        let mut t = &d.tracks[&track];
        while let Some(p) = t.parent {
            t = &d.tracks[&p];
        }
        &t.process.as_ref().expect("a process at the root").1
    }

    #[test]
    fn the_same_slices_processes_and_tracks_as_the_json() {
        let (traces, a) = fixtures::fixture();
        for opts in [
            PerfettoOptions::default(),
            PerfettoOptions {
                origin_step: Some(2),
            },
        ] {
            let d = decode(&protobuf(&traces, &a, &opts));
            let json: serde_json::Value =
                serde_json::from_str(&chrome_trace(&traces, &a, &opts)).unwrap();
            let events = json["traceEvents"].as_array().unwrap();
            let meta = |what: &str| -> BTreeMap<(u64, u64), String> {
                names(&json, what).into_iter().collect()
            };
            let (procs, threads) = (meta("process_name"), meta("thread_name"));
            // Processes: the JSON's names, numbered in display order.
            let mut pb_procs: Vec<(u64, String)> = d
                .tracks
                .values()
                .filter_map(|t| t.process.clone())
                .collect();
            pb_procs.sort();
            let mut by_sort: Vec<(u64, String)> = events
                .iter()
                .filter(|e| e["name"] == "process_sort_index")
                .map(|e| {
                    let pid = e["pid"].as_u64().unwrap();
                    (
                        e["args"]["sort_index"].as_u64().unwrap() + 1,
                        procs[&(pid, 0)].clone(),
                    )
                })
                .collect();
            by_sort.sort();
            assert_eq!(pb_procs, by_sort);
            // Tracks of each process: the JSON's threads in tid order, then the idle counter.
            for (pid, pname) in &by_sort {
                let json_pid = procs.iter().find(|(_, n)| *n == pname).unwrap().0.0;
                let want: Vec<&str> = threads
                    .iter()
                    .filter(|((p, _), _)| *p == json_pid)
                    .map(|(_, n)| n.as_str())
                    .collect();
                let puuid = d
                    .tracks
                    .iter()
                    .find(|(_, t)| t.process.as_ref().is_some_and(|p| p.0 == *pid))
                    .unwrap()
                    .0;
                let mut children: Vec<(&u64, &TrackInfo)> = d
                    .tracks
                    .iter()
                    .filter(|(_, t)| t.parent == Some(*puuid))
                    .collect();
                children.sort_by_key(|(_, t)| t.rank);
                let names: Vec<&str> = children.iter().map(|(_, t)| t.name.as_str()).collect();
                assert_eq!(names[0], "idle per step");
                assert!(children[0].1.counter);
                assert_eq!(&names[1..], &want[..], "{pname}");
            }
            // Slices: the JSON's, one for one (process, track name, name, ts, dur, category).
            let mut want: Vec<(String, String, String, u64, u64, String)> = events
                .iter()
                .filter(|e| e["ph"] == "X")
                .map(|e| {
                    let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
                    (
                        procs[&(key.0, 0)].clone(),
                        threads[&key].clone(),
                        e["name"].as_str().unwrap().to_owned(),
                        ns(&e["ts"]),
                        ns(&e["dur"]),
                        e["cat"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            let mut got: Vec<_> = slices(&d)
                .into_iter()
                .map(|(track, b, end)| {
                    (
                        process_of(&d, track).to_owned(),
                        d.tracks[&track].name.clone(),
                        b.name.clone(),
                        b.ts,
                        end - b.ts,
                        b.category.clone(),
                    )
                })
                .collect();
            want.sort();
            got.sort();
            assert_eq!(got, want);
            // The JSON's arguments are all there, with the same values.
            for e in events.iter().filter(|e| e["ph"] == "X") {
                let process = &procs[&(e["pid"].as_u64().unwrap(), 0)];
                let pb = d
                    .events
                    .iter()
                    .find(|p| {
                        p.kind == SLICE_BEGIN
                            && p.ts == ns(&e["ts"])
                            && p.category == e["cat"].as_str().unwrap()
                            && p.name == e["name"].as_str().unwrap()
                            && process_of(&d, p.track) == process
                    })
                    .unwrap();
                for (k, v) in e["args"].as_object().unwrap() {
                    let want = match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Bool(b) => u64::from(*b).to_string(),
                        serde_json::Value::Null => {
                            assert!(!pb.args.contains_key(k));
                            continue;
                        }
                        other => other.to_string(),
                    };
                    assert_eq!(pb.args[k], want, "{k} of {e}");
                }
            }
        }
    }

    #[test]
    fn every_launched_op_gets_a_flow_from_its_launch_call() {
        let (traces, a) = fixtures::fixture();
        let d = decode(&protobuf(&traces, &a, &PerfettoOptions::default()));
        let begins: Vec<&Event> = d.events.iter().filter(|e| e.kind == SLICE_BEGIN).collect();
        let mut from: HashMap<u64, &Event> = HashMap::new();
        let mut to: HashMap<u64, &Event> = HashMap::new();
        for e in &begins {
            for &id in &e.flows {
                assert!(from.insert(id, e).is_none(), "flow {id} starts twice");
            }
            for &id in &e.terminating {
                assert!(to.insert(id, e).is_none(), "flow {id} ends twice");
            }
        }
        assert_eq!(
            from.keys().collect::<BTreeSet<_>>(),
            to.keys().collect::<BTreeSet<_>>()
        );
        // Eager: one call per op; graphed: one call per replay, fanning out to its 5 ops.
        assert_eq!(from.len(), 2 * fixtures::STEPS * 5);
        for (id, call) in &from {
            let op = to[id];
            assert_eq!(call.category, "api");
            assert!(matches!(op.category.as_str(), "kernel" | "memset"));
            assert_eq!(call.args["corr"], op.args["corr"]);
            assert_eq!(process_of(&d, call.track), process_of(&d, op.track));
            assert!(d.tracks[&call.track].name.starts_with("host thread"));
            assert!(d.tracks[&op.track].name.starts_with("stream"));
        }
        let graph_calls = begins.iter().filter(|e| e.name == "cudaGraphLaunch");
        for call in graph_calls {
            assert_eq!(call.flows.len(), 5, "{call:?}");
        }
    }

    #[test]
    fn idle_per_step_is_a_counter_at_each_step() {
        let (traces, a) = fixtures::fixture();
        let d = decode(&protobuf(&traces, &a, &PerfettoOptions::default()));
        let counters: Vec<&Event> = d.events.iter().filter(|e| e.kind == COUNTER).collect();
        assert_eq!(counters.len(), 2 * fixtures::STEPS);
        let steps: Vec<&Event> = d.events.iter().filter(|e| e.category == "step").collect();
        for c in &counters {
            let step = steps
                .iter()
                .find(|s| s.ts == c.ts && process_of(&d, s.track) == process_of(&d, c.track))
                .expect("a step starts where its counter value is");
            assert_eq!(c.counter.unwrap().to_string(), step.args["idle_ns"]);
        }
        // The graphed cell's steps start GRAPHED_AT later, as in the JSON.
        let first = |kind: &str| {
            steps
                .iter()
                .filter(|s| s.args["regime"] == kind)
                .map(|s| s.ts)
                .min()
                .unwrap()
        };
        assert!(first("graphed") >= first("eager") + GRAPHED_AT - 3_000);
    }

    #[test]
    fn ops_carry_their_node_provenance_and_the_cause_of_the_gap_before() {
        let (mut traces, a) = fixtures::fixture();
        let t = &mut traces[0];
        let api = t.strings.len() as u32;
        t.strings.push("cudaGraphAddKernelNode".into());
        let lib = api + 1;
        t.strings.push("ncclAllGather".into());
        // The all-gather's node (position 2 of the fixture's graph 5).
        t.graph.nodes.push(GraphNode {
            id: (5u64 << 32) | 2,
            graph: 5,
            node_type: NodeType::Kernel,
            created_by: Some(api),
            library_call: Some(lib),
            cloned_from: Some((4u64 << 32) | 2),
            ..GraphNode::default()
        });
        let d = decode(&protobuf(&traces, &a, &PerfettoOptions::default()));
        let gathers: Vec<&Event> = d
            .events
            .iter()
            .filter(|e| e.name == "ncclDevKernel_AllGather_RING_LL" && e.args["graph"] == "5")
            .collect();
        assert_eq!(gathers.len(), fixtures::STEPS);
        for g in gathers {
            assert_eq!(g.args["node"], "0x500000002");
            assert_eq!(g.args["node_type"], "Kernel");
            assert_eq!(g.args["created_by"], "cudaGraphAddKernelNode");
            assert_eq!(g.args["library_call"], "ncclAllGather");
            assert_eq!(g.args["cloned_from"], "0x400000002");
            assert_eq!(g.args["stream"], "7");
            assert_eq!(g.args["gap_before_cause"], "external_event_wait");
            assert!(g.args["gap_before"].contains("NCCL graph usage mode 2"));
        }
        // Eager ops have no node: no provenance keys, but the cause of their gap.
        let eager_dispatch = d
            .events
            .iter()
            .find(|e| e.name == "dispatch" && e.args["graph"] == "0")
            .unwrap();
        assert!(!eager_dispatch.args.contains_key("node_type"));
        assert_eq!(eager_dispatch.args["gap_before_cause"], "host_launch_bound");
    }

    #[test]
    fn an_analysis_without_cells_is_an_empty_trace() {
        let (traces, mut a) = fixtures::fixture();
        a.cells.clear();
        assert!(protobuf(&traces, &a, &PerfettoOptions::default()).is_empty());
    }

    #[test]
    fn a_comparison_joins_matched_ops_across_its_processes_and_marks_the_largest_gap_change() {
        use crate::analysis::compare::pair_pictures;
        let (traces, _) = fixtures::fixture();
        // The fixture's eager cell against its graphed one: their gaps differ.
        let mut c = fixtures::comparison(1.02, vec![]);
        c.cells = vec![c.base.regime_pairs[0].clone()];
        let pictures = pair_pictures(&c);
        assert_eq!(pictures.len(), 1);
        let marked_op = pictures[0].largest_gap_change.expect("a gap changed");
        let mut buf = Vec::new();
        super::super::write_comparison_trace(
            &mut buf,
            &c,
            [&traces, &traces],
            ["BASE", "HEAD"],
            &pictures,
        )
        .unwrap();
        let d = decode(&buf);
        let processes: Vec<&str> = d
            .tracks
            .values()
            .filter_map(|t| Some(t.process.as_ref()?.1.as_str()))
            .collect();
        assert_eq!(processes.len(), 2, "{processes:?}");
        assert!(processes[0].starts_with("BASE — ") && processes[1].starts_with("HEAD — "));
        let slices = slices(&d);
        let mut flows: BTreeMap<u64, Vec<(String, String)>> = BTreeMap::new();
        for (track, e, _) in &slices {
            if ["kernel", "memcpy", "memset"].contains(&e.category.as_str()) {
                for &f in &e.flows {
                    let side = process_of(&d, *track)[..4].to_owned();
                    flows.entry(f).or_default().push((side, e.name.clone()));
                }
            }
        }
        let matched = c.cells[0]
            .aligned
            .iter()
            .filter(|a| a.base.is_some() && a.head.is_some())
            .count();
        assert_eq!(flows.len(), matched, "one flow per matched pair");
        for ends in flows.values_mut() {
            ends.sort();
            assert_eq!(ends.len(), 2);
            assert_eq!((ends[0].0.as_str(), ends[1].0.as_str()), ("BASE", "HEAD"));
            assert_eq!(ends[0].1, ends[1].1, "a flow joins ops of one name");
        }
        let gaps: Vec<&Event> = slices
            .iter()
            .map(|s| &s.1)
            .filter(|e| e.category == "gap")
            .collect();
        assert!(gaps.iter().any(|g| {
            g.args
                .get("base_to_head")
                .is_some_and(|t| t.contains(" → "))
        }));
        let marked: Vec<&&Event> = gaps
            .iter()
            .filter(|g| g.name.starts_with(super::super::LARGEST_CHANGE_PREFIX))
            .collect();
        assert!(!marked.is_empty(), "{gaps:?}");
        let a = &c.cells[0].aligned[marked_op];
        for g in marked {
            assert_eq!(g.args["largest_change"], "1");
            assert_eq!(
                g.args["after"], a.name,
                "the gap before the op analysis chose"
            );
        }
        // No idle counter: one step a side.
        assert!(d.tracks.values().all(|t| !t.counter));
    }
}
