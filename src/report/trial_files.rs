//! The names of the files a try writes (`try -o`): known to the writer of the set
//! (`output_set`) and to the report that lists them (`trial`), so that neither imports the
//! other.
#![forbid(unsafe_code)]

use crate::analysis::trial::TrialReport;

/// The files of a try's report (`try -o`, `try --from DIR -o OUT`).
pub const TRIAL_SET: [&str; 2] = ["try.md", "try.json"];

/// The rounds picture of a try (`try.svg`).
pub const TRIAL_SVG: &str = "try.svg";

/// `try-VARIANT`: the name (without extension) of a variant's pictures, its label with every
/// character but letters, digits and `-_=.` as `_`.
pub fn variant_picture_stem(label: &str) -> String {
    let safe: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_=.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("try-{safe}")
}

/// The files `try -o` writes for `r`, in the order written: try.md, try.json, try.svg, then
/// each judged variant's SVG and Perfetto trace.
pub fn trial_files(r: &TrialReport) -> Vec<String> {
    let mut files: Vec<String> = TRIAL_SET.iter().map(|f| (*f).to_owned()).collect();
    files.push(TRIAL_SVG.to_owned());
    for v in r
        .variants
        .iter()
        .filter(|v| crate::analysis::trial::pictured(v))
    {
        let stem = variant_picture_stem(&v.label);
        files.push(format!("{stem}.svg"));
        files.push(format!("{stem}.perfetto-trace"));
    }
    files
}
