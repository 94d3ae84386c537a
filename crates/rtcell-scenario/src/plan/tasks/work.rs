//! What a task runs (`workload`): spin (with injected long cycles), trajectory, inverse dynamics, drive,
//! log, the offload master, scribble, the COM master and the EtherCAT master, each checked against the
//! signals, rings, cells and segment it names, with its estimated execution time and the output signal
//! it needs. C code is checked in `c`.

use rtcell_tasks::spec::{COMMAND_VALUES, SETPOINT_VALUES, TORQUE_VALUES};
use rtcell_tasks::{Inject, TaskWork};

use crate::file::{RawEthercat, RawInject, RawWork};

use super::super::{CellRole, LINUX, Validator};
use super::{Named, TaskContext, TaskUses, Work};

impl Validator<'_> {
    /// The task's work, with its estimate and the output it needs.
    pub(super) fn work(&mut self, cx: &TaskContext, uses: &mut TaskUses, n: &Named, period_us: u64) -> Work {
        let p = n.p.as_str();
        match &n.t.workload {
            RawWork::Spin { us, inject } => self.spin(p, *us, inject.as_ref()),
            RawWork::Trajectory { from_deg, to_deg, move_s } => {
                self.finite(&format!("{p}.workload.from_deg"), *from_deg);
                self.finite(&format!("{p}.workload.to_deg"), *to_deg);
                if !(move_s.is_finite() && *move_s > 0.0) {
                    self.err(&format!("{p}.workload.move_s"), "move time must be above 0 s", "move_s = 2");
                }
                let work = TaskWork::Trajectory { from_deg: *from_deg, to_deg: *to_deg, move_s: *move_s };
                (work, 2.0, Some(SETPOINT_VALUES))
            }
            RawWork::InverseDynamics { setpoint } => {
                self.check_signal(&format!("{p}.workload.setpoint"), setpoint, Some(SETPOINT_VALUES), cx.d);
                (TaskWork::InverseDynamics { setpoint: setpoint.clone() }, 5.0, Some(TORQUE_VALUES))
            }
            RawWork::Drive { setpoint, torque, us } => {
                self.check_signal(&format!("{p}.workload.setpoint"), setpoint, Some(SETPOINT_VALUES), cx.d);
                self.check_signal(&format!("{p}.workload.torque"), torque, Some(TORQUE_VALUES), cx.d);
                if self.finite(&format!("{p}.workload.us"), *us) && *us < 0.0 {
                    self.err(&format!("{p}.workload.us"), "bus time must be >= 0", "us = 20");
                }
                let work = TaskWork::Drive { setpoint: setpoint.clone(), torque: torque.clone(), us: us.max(0.0) };
                (work, us.max(0.0) + 2.0, Some(COMMAND_VALUES))
            }
            RawWork::Log { file, signals, tasks } => self.log_work(cx, n, file, signals, tasks),
            RawWork::Master { request, reply } => self.master_work(cx, uses, n, request, reply),
            RawWork::C { library, init, step, payload, com } => {
                self.c_work(cx, uses, n, super::c::CCode { library, init, step, payload, com })
            }
            RawWork::Scribble { channel, at_cycle, cycles } => {
                let known = cx.d.channel_bytes.contains_key(channel.as_str())
                    || cx.d.signal_values.contains_key(channel.as_str())
                    || cx.d.raw.com.contains_key(channel)
                    || channel.strip_prefix("task.").is_some_and(|t| cx.d.raw.tasks.contains_key(t));
                if !known {
                    self.err(
                        &format!("{p}.workload.channel"),
                        format!("no channel named {channel:?}"),
                        "name a [channels], [signals] or [com] channel of the scenario, or task.<task>",
                    );
                }
                (TaskWork::Scribble { channel: channel.clone(), at_cycle: *at_cycle, cycles: *cycles }, 1.0, None)
            }
            RawWork::ComMaster { input, output } => {
                let ids = self.com_master_ids(p, input, output, cx.coms);
                (TaskWork::ComMaster { input: input.clone(), output: output.clone(), ids }, 5.0, None)
            }
            RawWork::Ethercat { outputs } => self.ethercat_work(cx, p, outputs.as_ref(), period_us),
        }
    }

    fn spin(&mut self, p: &str, us: f64, inject: Option<&RawInject>) -> Work {
        if self.finite(&format!("{p}.workload.us"), us) && us < 0.0 {
            self.err(&format!("{p}.workload.us"), "spin time must be >= 0", "us = 50");
        }
        let inject = inject.map(|i| {
            self.finite(&format!("{p}.workload.inject.us"), i.us);
            Inject { at_cycle: i.at_cycle, cycles: i.cycles, us: i.us.max(0.0) }
        });
        (TaskWork::Spin { us: us.max(0.0), inject }, us.max(0.0), None)
    }

    /// A log task: on the Linux side (it writes a file), of declared signals and tasks.
    fn log_work(&mut self, cx: &TaskContext, n: &Named, file: &str, signals: &[String], logged: &[String]) -> Work {
        let p = &n.p;
        if n.t.cell != LINUX {
            self.err(
                &format!("{p}.cell"),
                "a log task writes a file: it runs only on the Linux side",
                "cell = \"linux\"",
            );
        }
        for s in signals {
            self.check_signal(&format!("{p}.workload.signals"), s, None, cx.d);
        }
        for lt in logged {
            if !cx.d.raw.tasks.contains_key(lt) {
                self.err(
                    &format!("{p}.workload.tasks"),
                    format!("no task named {lt:?}"),
                    "list tasks of this scenario",
                );
            }
        }
        let work =
            TaskWork::Log { file: file.to_string(), signals: signals.to_vec(), tasks: logged.to_vec(), created: None };
        (work, 50.0, None)
    }

    /// The offload master: its rings carry the controller's messages, and a cell serves the controller
    /// on them (its precision is the master's).
    fn master_work(&mut self, cx: &TaskContext, uses: &mut TaskUses, n: &Named, request: &str, reply: &str) -> Work {
        let (p, tname) = (&n.p, n.name);
        for (field, ch) in [("workload.request", request), ("workload.reply", reply)] {
            self.offload_channel(&format!("{p}.{field}"), ch, cx.d);
        }
        let at = |field: &str| (format!("task {tname:?}"), format!("{p}.workload.{field}"));
        uses.ends.producers.entry(request.to_string()).or_default().push(at("request"));
        uses.ends.consumers.entry(reply.to_string()).or_default().push(at("reply"));
        let served = cx.cells.iter().find_map(|c| match &c.role {
            CellRole::Controller { request: r, reply: q, precision } if r == request && q == reply => {
                precision.parse::<rtcell_control::offload::Precision>().ok()
            }
            _ => None,
        });
        if served.is_none() {
            self.err(
                &format!("{p}.workload"),
                format!("no cell serves the controller on {request:?} / {reply:?}"),
                format!("add a cell with service = {{ kind = \"controller\", request = \"{request}\", reply = \"{reply}\" }}"),
            );
        }
        let precision = served.unwrap_or(rtcell_control::offload::Precision::F64);
        (TaskWork::Master { request: request.to_string(), reply: reply.to_string(), precision }, 5.0, None)
    }

    /// The EtherCAT master: it needs the scenario's segment; its output holds two values per device.
    fn ethercat_work(&mut self, cx: &TaskContext, p: &str, outputs: Option<&String>, period_us: u64) -> Work {
        let ec = cx.d.raw.ethercat.clone().unwrap_or_else(|| {
            self.err(
                &format!("{p}.workload"),
                "an ethercat task needs the scenario's [ethercat] segment",
                "add [ethercat] simulated = 3 (or interface = \"eth1\" for a real segment)",
            );
            RawEthercat { interface: None, simulated: None, drop_after: None, timeout_us: None, busy_poll: None }
        });
        if let Some(o) = outputs {
            self.check_signal(&format!("{p}.workload.outputs"), o, None, cx.d);
        }
        // Two values (digital, analog) per device of a simulated segment.
        let needs_output = Some(2 * usize::from(ec.simulated.unwrap_or(1).max(1)));
        // A frame out longer than most of the period is lost: the next cycle needs the socket.
        let timeout_us = ec.timeout_us.unwrap_or(period_us.saturating_mul(9) / 10).max(1);
        let interface = ec.interface.clone().unwrap_or_default();
        let busy_poll = ec.busy_poll.unwrap_or(false);
        (TaskWork::Ethercat { interface, outputs: outputs.cloned(), timeout_us, busy_poll }, 40.0, needs_output)
    }
}
