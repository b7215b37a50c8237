//! Where each device op came from in the program: the NVTX ranges open on the launching thread
//! (outermost first) and the library call that launched it.
//!
//! A replayed op has no launch call of its own (its corr is the graph launch's): it inherits
//! the provenance of its graph node, taken when the node was created — a clone's from its
//! template, since capture, not instantiation, is where the program's code ran. An eager op
//! takes the ranges open on its launch call's thread when the call started, and the innermost
//! library-call range there (NCCL's NVTX ranges, or gapscope's own markers).
//!
//! Any output can name every op's provenance (the Perfetto writer in its slice args): build a
//! [`ProvenanceIndex`] and a [`LaunchIndex`] once per trace, then ask [`ProvenanceIndex::of`]
//! per op of the trace's timeline.
#![forbid(unsafe_code)]

use super::host_samples::own_code;
use super::model::Op;
use super::timeline::LaunchIndex;
use crate::trace::{GraphNode, HostFrame, HostRanges, StrId, Trace};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// What a torch.profiler (Kineto) import cannot have of the above, said once per input.
pub const KINETO_NOTE: &str = "torch.profiler (Kineto) records no graph node creation: \
replayed ops carry no provenance (no NVTX ranges at capture, no library call), so no graphed cell \
can name where its replayed kernels came from; graph coverage, the eager ops' provenance (from \
the imported ranges) and the launch ↔ device record check are read as for a recording, NVTX \
ranges never ended cannot be counted";

/// Where an op came from: `ranges` outermost first; `code` the program's own Python frame that
/// created its graph node (a replayed op of a recording that read Python frames); `library`
/// the library function that launched it (e.g. `ncclAllGather`, `cublasLtMatmul`), when the
/// trace holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Provenance {
    pub ranges: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub library: Option<String>,
}

impl Provenance {
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.code.is_none() && self.library.is_none()
    }

    /// "decode_step/layer 3/mlp ← model.py:118 forward ← cublasLtMatmul" (ranges, code,
    /// library, each when known); a library's own NVTX range (NCCL's
    /// `ncclAllGather`) is not repeated before its name, and a long template argument list
    /// of a torch function is elided (`at::native::gpu_kernel_impl<…>`; `library` keeps it).
    pub fn label(&self) -> String {
        let mut ranges: &[String] = &self.ranges;
        if let (Some(last), Some(lib)) = (ranges.last(), &self.library)
            && last == lib
        {
            ranges = &ranges[..ranges.len() - 1];
        }
        let path = ranges.join("/");
        let library = self.library.as_deref().map(elide_long_templates);
        let after: Vec<&str> = [self.code.as_deref(), library.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        match (after.is_empty(), path.is_empty()) {
            (true, _) => path,
            (false, true) => format!("← {}", after.join(" ← ")),
            (false, false) => format!("{path} ← {}", after.join(" ← ")),
        }
    }
}

/// `name` with each top-level template argument list longer than a few words elided: `<…>`.
fn elide_long_templates(name: &str) -> String {
    const LONGEST_KEPT: usize = 24;
    let mut out = String::with_capacity(name.len().min(128));
    let mut depth = 0usize;
    let mut list = String::new();
    for c in name.chars() {
        match c {
            '<' => {
                depth += 1;
                if depth == 1 {
                    list.clear();
                    continue;
                }
            }
            '>' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    if list.chars().count() > LONGEST_KEPT {
                        out.push_str("<…>");
                    } else {
                        out.push('<');
                        out.push_str(&list);
                        out.push('>');
                    }
                    continue;
                }
            }
            _ => {}
        }
        if depth > 0 {
            list.push(c);
        } else {
            out.push(c);
        }
    }
    if depth > 0 {
        // Unbalanced (a cut name): what is left, as it is.
        out.push('<');
        out.push_str(&list);
    }
    out
}

/// Per trace: every node's provenance, and the ranges for eager launches.
pub struct ProvenanceIndex {
    /// Every host range (step markers, NVTX ranges, library calls) by thread.
    ranges: HostRanges,
    library_calls: HostRanges,
    /// Graph node id → its provenance; nodes without any are absent.
    nodes: FxHashMap<u64, Provenance>,
}

impl ProvenanceIndex {
    pub fn new(trace: &Trace) -> ProvenanceIndex {
        let ranges = HostRanges::new(
            trace
                .markers
                .iter()
                .map(|m| (m.thread, m.start, m.end, m.name)),
        );
        let by_id: FxHashMap<u64, &GraphNode> =
            trace.graph.nodes.iter().map(|n| (n.id, n)).collect();
        let names = |ids: Vec<StrId>| ids.into_iter().map(|s| trace.str(s).to_owned()).collect();
        let nodes = trace
            .graph
            .nodes
            .iter()
            .filter_map(|n| {
                // A clone was made at instantiation: its template holds the capture's context.
                let origin = n.cloned_from.and_then(|t| by_id.get(&t)).copied();
                let creation = [origin, Some(n)]
                    .into_iter()
                    .flatten()
                    .find_map(|c| Some((c.created_thread?, c.created_at?)));
                let library = [origin, Some(n)]
                    .into_iter()
                    .flatten()
                    .find_map(|c| c.library_frame.or(c.library_call))
                    .map(|s| trace.str(s).to_owned());
                let code = [origin, Some(n)]
                    .into_iter()
                    .flatten()
                    .find_map(|c| c.python_stack)
                    .and_then(|s| creating_code(trace.str(s)));
                let p = Provenance {
                    ranges: creation
                        .map_or_else(Vec::new, |(thread, at)| names(ranges.enclosing(thread, at))),
                    code,
                    library,
                };
                (!p.is_empty()).then_some((n.id, p))
            })
            .collect();
        ProvenanceIndex {
            ranges,
            library_calls: HostRanges::library_calls(trace, true),
            nodes,
        }
    }

    /// The provenance of `op`: its node's for a replayed op, its launch call's for an eager
    /// one; `None` when the trace holds none.
    pub fn of(&self, trace: &Trace, launches: &LaunchIndex, op: &Op) -> Option<Provenance> {
        if op.graph != 0 {
            return self.nodes.get(&op.node).cloned();
        }
        let (launched, _, thread) = launches.call(op.corr)?;
        let p = Provenance {
            ranges: self
                .ranges
                .enclosing(thread, launched)
                .into_iter()
                .map(|s| trace.str(s).to_owned())
                .collect(),
            code: None,
            library: self
                .library_calls
                .innermost(thread, launched)
                .map(|s| trace.str(s).to_owned()),
        };
        (!p.is_empty()).then_some(p)
    }

    /// Whether the replayed op of graph node `node` has a provenance.
    pub fn node_has_provenance(&self, node: u64) -> bool {
        self.nodes.contains_key(&node)
    }

    /// Whether the replayed op of graph node `node` names the program's Python code that
    /// created it.
    pub fn node_has_code(&self, node: u64) -> bool {
        self.nodes.get(&node).is_some_and(|p| p.code.is_some())
    }

    /// Whether any node of the trace names its Python code (the recording read them).
    pub fn any_code(&self) -> bool {
        self.nodes.values().any(|p| p.code.is_some())
    }
}

/// The program's own frame that created a node, from its Python stack: the innermost frame
/// outside the runtime ([`own_code`]), or the outermost frame when every frame is the
/// runtime's.
pub fn creating_code(stack: &str) -> Option<String> {
    let frames = HostFrame::parse_stack(stack);
    let refs: Vec<&HostFrame> = frames.iter().collect();
    (!refs.is_empty()).then(|| own_code(&refs).0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_the_range_path_then_the_library() {
        let p = |ranges: &[&str], library: Option<&str>| Provenance {
            ranges: ranges.iter().map(|s| s.to_string()).collect(),
            code: None,
            library: library.map(str::to_owned),
        };
        assert_eq!(
            p(&["decode_step", "layer 3", "mlp"], Some("cublasLtMatmul")).label(),
            "decode_step/layer 3/mlp ← cublasLtMatmul"
        );
        assert_eq!(
            p(&["decode_step", "ncclAllGather"], Some("ncclAllGather")).label(),
            "decode_step ← ncclAllGather",
            "NCCL's own range is not said twice"
        );
        assert_eq!(p(&[], Some("ncclAllGather")).label(), "← ncclAllGather");
        assert_eq!(p(&["a", "b"], None).label(), "a/b");
        assert_eq!(
            p(
                &[],
                Some(
                    "at::native::gpu_kernel_impl<__nv_hdl_wrapper_t<false, true, false, \
                     __nv_dl_tag<void (*)(at::TensorIteratorBase&), &at::native::rsqrt_kernel_cuda, \
                     2u>, float (float)>>"
                )
            )
            .label(),
            "← at::native::gpu_kernel_impl<…>",
            "a long template list is elided"
        );
        assert_eq!(
            p(&[], Some("at::native::reduce_kernel<128, 4>")).label(),
            "← at::native::reduce_kernel<128, 4>",
            "a short one is kept"
        );
        assert_eq!(
            p(&[], Some("operator<<")).label(),
            "← operator<<",
            "an unbalanced name is kept as it is"
        );
        assert!(p(&[], None).is_empty());
    }

    #[test]
    fn a_node_names_the_programs_innermost_own_frame_between_its_ranges_and_library() {
        let site = "/venv/lib/python3.12/site-packages";
        let stack = [
            HostFrame::stack_line(&format!("{site}/torch/nn/functional.py"), 2380, "linear"),
            HostFrame::stack_line("/home/u/app/models/mlp.py", 118, "forward"),
            HostFrame::stack_line(
                &format!("{site}/torch/nn/modules/module.py"),
                1750,
                "_call_impl",
            ),
            HostFrame::stack_line("/home/u/app/decode.py", 40, "decode_step"),
        ]
        .join("\n");
        let code = creating_code(&stack);
        assert_eq!(code.as_deref(), Some("models/mlp.py:118 forward"));
        let p = Provenance {
            ranges: vec!["decode_step".into()],
            code,
            library: Some("cublasLtMatmul".into()),
        };
        assert_eq!(
            p.label(),
            "decode_step ← models/mlp.py:118 forward ← cublasLtMatmul"
        );
        let only_code = Provenance {
            code: Some("decode.py:40 decode_step".into()),
            ..Provenance::default()
        };
        assert_eq!(only_code.label(), "← decode.py:40 decode_step");
        // Inductor's generated code is a library's: the program's frame outside it names the node.
        let compiled = [
            HostFrame::stack_line("/tmp/torchinductor_root/q3/cq3abc.py", 212, "call"),
            HostFrame::stack_line(
                &format!("{site}/torch/_inductor/cudagraph_trees.py"),
                900,
                "run",
            ),
            HostFrame::stack_line("/home/u/app/decode.py", 52, "main"),
        ]
        .join("\n");
        assert_eq!(
            creating_code(&compiled).as_deref(),
            Some("app/decode.py:52 main")
        );
        assert_eq!(creating_code(""), None);
    }
}
