//! One section per suite: the suite's own view where rtcell knows the suite (tables in the seeds' shape
//! and their plots), then every series no view took in a generic table and histograms, the published
//! figures of other platforms, and the configuration.

use maud::{Markup, html};

use super::{Page, control, hist, loopback, membench, reference, tables, timing};
use crate::doc::{Series, Suite};
use crate::error::ReportError;

/// Generic histogram figures per suite at most (the table carries every series anyway).
const MAX_GENERIC_FIGURES: usize = 6;

/// Hands out a suite's series to the views, each at most once; what is left goes to the generic table.
pub(super) struct Picker<'a> {
    series: &'a [Series],
    used: Vec<bool>,
}

impl<'a> Picker<'a> {
    pub(super) fn new(series: &'a [Series]) -> Picker<'a> {
        Picker { series, used: vec![false; series.len()] }
    }

    /// Every series named `name` not yet taken, in document order.
    pub(super) fn take(&mut self, name: &str) -> Vec<&'a Series> {
        self.take_if(|s| s.name == name)
    }

    pub(super) fn take_if(&mut self, keep: impl Fn(&Series) -> bool) -> Vec<&'a Series> {
        let mut out = Vec::new();
        for (i, s) in self.series.iter().enumerate() {
            if !self.used[i] && keep(s) {
                self.used[i] = true;
                out.push(s);
            }
        }
        out
    }

    /// The series no view took.
    fn rest(&self) -> Vec<&'a Series> {
        self.series.iter().zip(&self.used).filter(|(_, u)| !**u).map(|(s, _)| s).collect()
    }
}

/// What a view needs: the suite, its section id (prefix of every id inside), the page's counters.
pub(super) struct Ctx<'a, 'p> {
    pub suite: &'a Suite,
    pub id: &'a str,
    pub page: &'p mut Page,
}

impl Ctx<'_, '_> {
    /// A config value as a display string ("-" when absent).
    pub(super) fn config_text(&self, key: &str) -> String {
        match self.suite.config.get(key) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Null) | None => "-".into(),
            Some(v) => v.to_string(),
        }
    }
}

pub(super) fn render(suite: &Suite, id: &str, page: &mut Page) -> Result<Markup, ReportError> {
    let mut pick = Picker::new(&suite.series);
    let mut ctx = Ctx { suite, id, page };
    let (heading, view) = match suite.suite.as_str() {
        "loopback" => ("Loopback round trip (seed 000 Table I, Fig. 2)", loopback::loopback(&mut ctx, &mut pick)?),
        "c2c" => ("Core-to-core cache-line round trip", loopback::c2c_suite(&mut ctx, &mut pick)?),
        "control" => {
            ("Controller step, local and offloaded (seed 000 Fig. 3/4)", control::render(&mut ctx, &mut pick)?)
        }
        "latency" => ("Activation latency", timing::latency(&mut ctx, &mut pick)?),
        "scenario" => ("Scenario: periodic tasks and channels", timing::scenario(&mut ctx, &mut pick)?),
        "membench" => {
            ("Memory read latency against working-set size (seed 004 Fig. 5)", membench::render(&mut ctx, &mut pick)?)
        }
        _ => ("", html! {}),
    };
    let rest = pick.rest();
    let known = !heading.is_empty();
    let rest_what = if known { "Other series of this suite" } else { "Every series of this suite" };
    let rest_table =
        (!rest.is_empty()).then(|| tables::series_table(&format!("{id}-series"), rest_what, &rest, ctx.page));
    let rest_figures =
        if rest.is_empty() { None } else { Some(hist::generic_figures(id, &rest, MAX_GENERIC_FIGURES, ctx.page)?) };
    let published = reference::table(suite, &format!("{id}-published"), ctx.page);
    let config = serde_json::to_string_pretty(&suite.config).unwrap_or_else(|_| suite.config.to_string());
    Ok(html! {
        section.suite id=(id) {
            h2 {
                "Suite " code { (suite.suite) }
                @if known { ": " (heading) }
            }
            @if !known {
                p.note {
                    "rtcell has no special view of this suite: every series is listed with its labels, unit and kind, \
                     and the histograms are drawn where they can be overlaid."
                }
            }
            p.note { (suite.series.len()) " series." }
            (view)
            @if let Some(t) = rest_table { h3 { (rest_what) } (t) }
            @if let Some(f) = rest_figures { (f) }
            @if let Some(p) = published { h3 { "Published figures, other platforms" } (p) }
            details id={ (id) "-config" } {
                summary { "Configuration of the run (JSON, as recorded)" }
                pre { (config) }
            }
        }
    })
}
