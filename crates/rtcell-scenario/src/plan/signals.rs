//! `[signals.NAME]`: the signals (name and count of values; the write rules of a writable one are in
//! `writable`), a task's reference to a signal (declared, holding enough values), and the tasks around a
//! writable signal: the gateway is its only writer, and one task reads and acknowledges it.

use std::collections::BTreeMap;

use super::{Declared, MAX_SIGNAL_VALUES, PlanSignal, Validator, name_problem};

impl Validator<'_> {
    /// Every signal, checked: its name, its count of values, and the rules of a writable one.
    pub(super) fn signals(&mut self, d: &Declared) -> Vec<PlanSignal> {
        let mut signals = Vec::new();
        for (n, s) in &d.raw.signals {
            let p = format!("signals.{n}");
            if let Some(why) = name_problem(n, 32) {
                self.err(&p, why, "rename the signal");
            }
            if s.values == 0 || s.values > MAX_SIGNAL_VALUES {
                self.err(&format!("{p}.values"), format!("values must be 1 to {MAX_SIGNAL_VALUES}"), "values = 1");
            }
            let writable = self.writable_signal(&p, n, s, d.raw);
            signals.push(PlanSignal { name: n.clone(), values: s.values, writable });
        }
        signals
    }

    /// Signal `name`, named at `at`: declared, and holding at least `need` values when given.
    pub(super) fn check_signal(&mut self, at: &str, name: &str, need: Option<usize>, d: &Declared) {
        match d.signal_values.get(name) {
            None => self.err(
                at,
                format!("no signal named {name:?}"),
                format!("declare it: [signals.{name}] values = {}", need.unwrap_or(1)),
            ),
            Some(&have) => {
                if let Some(need) = need
                    && (have as usize) < need
                {
                    self.err(
                        at,
                        format!("signal {name:?} holds {have} values, this needs {need}"),
                        format!("set [signals.{name}] values = {need}"),
                    );
                }
            }
        }
    }

    /// Each writable signal: no task writes it (`outputs`: signal → writer), and the task that reads
    /// and acknowledges it (`readers`: signal → task) becomes its reader.
    pub(super) fn writable_readers(
        &mut self,
        signals: &mut [PlanSignal],
        outputs: &BTreeMap<String, String>,
        readers: &BTreeMap<String, String>,
    ) {
        for s in signals {
            let Some(w) = &mut s.writable else { continue };
            if let Some(writer) = outputs.get(&s.name) {
                self.err(
                    &format!("signals.{}.writable", s.name),
                    format!(
                        "task {writer:?} writes signal {:?}: a writable signal has one writer, the gateway",
                        s.name
                    ),
                    "write the task's output to another signal",
                );
            }
            match readers.get(&s.name) {
                Some(task) => w.reader = task.clone(),
                None => self.err(
                    &format!("signals.{}.writable", s.name),
                    format!("no task reads writable signal {:?}, so no write to it could be acknowledged", s.name),
                    format!("add params = [\"{}\"] to the task that uses it", s.name),
                ),
            }
        }
    }
}
