//! Old traces read as new ones: what earlier gapscope versions wrote under old names, or said
//! only in a note, becomes today's typed fields once, when the trace is read, so that no
//! analysis matches prose.
#![forbid(unsafe_code)]

use super::{STEP_RANGE_CHOSEN, Trace};

/// Launch values that traces written before the launch names were unified carry (the emu
/// workload's `single-exec`/`exec-per-step`/`two-execs-alternating`), with today's names.
pub const OLD_LAUNCH_NAMES: [(&str, &str); 3] = [
    ("single-exec", "replay"),
    ("exec-per-step", "fresh"),
    ("two-execs-alternating", "alternating"),
];

/// Brings a trace just read up to today's fields.
pub(super) fn upgrade(trace: &mut Trace) {
    rename_old_launch_values(trace);
    unended_ranges_from_notes(trace);
    step_range_choice_from_notes(trace);
}

/// Renames old launch values in cells' `requested["launch"]`, and the same word in those
/// cells' labels (gapscope wrote both), so old and new traces read alike.
fn rename_old_launch_values(trace: &mut Trace) {
    for cell in &mut trace.metadata.cells {
        let Some(serde_json::Value::String(launch)) = cell.requested.get_mut("launch") else {
            continue;
        };
        let Some((old, new)) = OLD_LAUNCH_NAMES.iter().find(|(old, _)| launch == old) else {
            continue;
        };
        *launch = (*new).to_string();
        cell.label = cell
            .label
            .split(' ')
            .map(|word| if word == *old { *new } else { word })
            .collect::<Vec<_>>()
            .join(" ");
    }
}

/// Traces written before `metadata.unended_ranges` existed say it in a recorder note only:
/// "recorder: N NVTX ranges were started but never ended (left out)".
fn unended_ranges_from_notes(trace: &mut Trace) {
    let noted: u64 = trace
        .metadata
        .notes
        .iter()
        .filter_map(|n| {
            let rest = n.strip_prefix("recorder: ")?;
            let (count, what) = rest.split_once(' ')?;
            what.starts_with("NVTX ranges were started but never ended")
                .then(|| count.parse::<u64>().ok())
                .flatten()
        })
        .sum();
    trace.metadata.unended_ranges = trace.metadata.unended_ranges.max(noted);
}

/// Recordings made before the workload said the recorder chose its `step_range` ([`STEP_RANGE_CHOSEN`])
/// say it in a note: "step range `NAME` chosen by the recorder".
fn step_range_choice_from_notes(trace: &mut Trace) {
    let metadata = &mut trace.metadata;
    if metadata.workload.contains_key(STEP_RANGE_CHOSEN) {
        return;
    }
    let Some(name) = metadata.workload.get("step_range").and_then(|v| v.as_str()) else {
        return;
    };
    let said = format!("step range `{name}` chosen by the recorder");
    if metadata.notes.iter().any(|n| n.contains(&said)) {
        let name = name.to_owned();
        metadata.set_step_range(&name, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_of_old_recordings_become_fields() {
        let mut t = Trace::new(crate::trace::Metadata::default());
        t.metadata.notes = vec![
            "recorder: 3 NVTX ranges were started but never ended (left out)".into(),
            "step range `decode_step` chosen by the recorder: the outermost NVTX range …".into(),
        ];
        t.metadata
            .workload
            .insert("step_range".into(), "decode_step".into());
        upgrade(&mut t);
        assert_eq!(t.metadata.unended_ranges, 3);
        assert_eq!(t.metadata.workload[STEP_RANGE_CHOSEN], true);

        // A range given with --step-range: no note, no choice.
        let mut given = Trace::new(crate::trace::Metadata::default());
        given
            .metadata
            .workload
            .insert("step_range".into(), "decode_step".into());
        upgrade(&mut given);
        assert!(!given.metadata.workload.contains_key(STEP_RANGE_CHOSEN));
        assert_eq!(given.metadata.unended_ranges, 0);
    }
}
