//! Results of rtcell runs: the `rtcell.results/1` document, statistics over samples, terminal tables and
//! the published reference figures that runs are compared with.
//!
//! Every suite and scenario produces one [`Results`] document per run. Other tools, reports and the
//! history read only that document, so its layout lives in one place ([`doc`]) and follows
//! `schema/results.schema.json`; a change to the layout bumps [`SCHEMA_ID`].

pub mod columns;
pub mod doc;
pub mod error;
pub mod export;
pub mod goal;
pub mod history;
pub mod html;
pub mod progress;
pub mod published;
pub mod stats;
pub mod table;

pub use doc::{Histogram, Kind, Results, SCHEMA_ID, Series, Stats, Suite, ToolInfo, Unit};
pub use error::ReportError;
pub use rtcell_host::facts::HostFacts;
pub use stats::labels;

/// Builds a series' label map: `labels!("cell" => "thread", "bytes" => 64)`.
///
/// Values may be anything that implements `ToString`, so sizes and counts need no `format!`.
///
/// ```
/// let l = rtcell_report::labels!("cell" => "kvm", "bytes" => 64);
/// assert_eq!(l["bytes"], "64");
/// ```
#[macro_export]
macro_rules! labels {
    () => { ::std::collections::BTreeMap::<::std::string::String, ::std::string::String>::new() };
    ($($key:expr => $value:expr),+ $(,)?) => {{
        let mut map = ::std::collections::BTreeMap::<::std::string::String, ::std::string::String>::new();
        $( map.insert(::std::string::ToString::to_string(&$key), ::std::string::ToString::to_string(&$value)); )+
        map
    }};
}
