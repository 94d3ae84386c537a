//! Arguments a built-in kvm payload cannot start without, checked at validation (the payload would
//! otherwise fault at start, exit 1, with no line of the file).

use super::Validator;

/// For each payload that needs some: the argument keys of which at least one must be given.
const ONE_OF: &[(&str, &[&str])] = &[("spin", &["hist", "log"])];

/// The `key=value` lines of a payload's args as the guest reads them (`BootInfo::arg` in rtcell-guest:
/// the key is everything before the first '=', nothing trimmed), so validation sees what the payload sees.
pub(crate) fn arg_pairs(args: &str) -> impl Iterator<Item = (&str, &str)> {
    args.lines().filter_map(|l| l.split_once('='))
}

impl Validator<'_> {
    /// `args` (`key=value` lines) of payload `payload` of the cell at `p` hold what the payload needs.
    pub(super) fn check_payload_args(&mut self, p: &str, payload: &str, args: Option<&str>) {
        let Some((_, keys)) = ONE_OF.iter().find(|(name, _)| *name == payload) else { return };
        let given: Vec<&str> = arg_pairs(args.unwrap_or("")).map(|(k, _)| k).collect();
        if keys.iter().any(|k| given.contains(k)) {
            return;
        }
        let want: Vec<String> = keys.iter().map(|k| format!("{k}=<channel>")).collect();
        let at = if args.is_some() { format!("{p}.args") } else { format!("{p}.payload") };
        self.err(
            &at,
            format!("payload {payload:?} needs {} in its args", want.join(" or ")),
            format!(
                "e.g. args = \"{}\" (a channel the payload writes, listed in writes)",
                want[0].replace("<channel>", "hist")
            ),
        );
    }
}
