//! Fuzzing what clients send: any bytes decoded as any request never panic, and any write request,
//! however odd, is either refused or carries only values of the signal's type within its range.

use proptest::prelude::*;
use prost::Message;
use rtcell_gateway::pb;
use rtcell_scenario::HostView;
use rtcell_scenario::plan::{Plan, ValueType};

const SCENARIO: &str = r#"
duration_s = 1
[cells.plc]
kind = "thread"
cpu = 1
[signals.ro]
values = 1
[signals.limit]
values = 1
writable = true
min = -5.0
max = 5.0
[signals.flag]
values = 1
writable = true
type = "bool"
[signals.count]
values = 2
writable = true
type = "i64"
min = 0
max = 1000
[tasks.t]
cell = "plc"
period_us = 1000
priority = 80
workload = { kind = "spin", us = 5 }
output = "ro"
params = ["limit", "flag", "count"]
"#;

fn plan() -> Plan {
    let host = HostView { online: vec![0, 1], kvm_unusable: None, payloads: vec![] };
    rtcell_scenario::validate_text(SCENARIO, std::path::Path::new("fuzz.toml"), &host).expect("the fixture validates")
}

fn value() -> impl Strategy<Value = pb::Value> {
    use pb::value::Kind;
    prop_oneof![
        any::<f64>().prop_map(|x| pb::Value { kind: Some(Kind::F64(x)) }),
        (-20.0f64..20.0).prop_map(|x| pb::Value { kind: Some(Kind::F64(x)) }),
        any::<i64>().prop_map(|x| pb::Value { kind: Some(Kind::I64(x)) }),
        (-5i64..1200).prop_map(|x| pb::Value { kind: Some(Kind::I64(x)) }),
        any::<bool>().prop_map(|x| pb::Value { kind: Some(Kind::Bool(x)) }),
        Just(pb::Value { kind: None }),
    ]
}

fn request() -> impl Strategy<Value = pb::WriteSignalRequest> {
    let name = prop_oneof![
        Just("ro".to_string()),
        Just("limit".into()),
        Just("flag".into()),
        Just("count".into()),
        "[a-z.]{0,12}"
    ];
    (name, proptest::collection::vec(value(), 0..4), any::<u32>())
        .prop_map(|(name, values, timeout_ms)| pb::WriteSignalRequest { name, values, timeout_ms })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_decode_to_a_request_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let plan = plan();
        let _ = pb::GetStatsRequest::decode(bytes.as_slice());
        let _ = pb::StreamStatsRequest::decode(bytes.as_slice());
        let _ = pb::ReadSignalRequest::decode(bytes.as_slice());
        let _ = pb::StartScenarioRequest::decode(bytes.as_slice());
        let _ = pb::DeployPayloadRequest::decode(bytes.as_slice());
        let _ = pb::GetResultsRequest::decode(bytes.as_slice());
        if let Ok(req) = pb::WriteSignalRequest::decode(bytes.as_slice()) {
            let _ = rtcell_gateway::write::check(&plan, &req);
        }
    }

    #[test]
    fn an_accepted_write_respects_the_declaration(req in request()) {
        let plan = plan();
        // Encoded and decoded as the server sees it.
        let req = pb::WriteSignalRequest::decode(req.encode_to_vec().as_slice()).unwrap();
        if let Ok((sig, values)) = rtcell_gateway::write::check(&plan, &req) {
            let w = sig.writable.as_ref().expect("only writable signals are accepted");
            prop_assert_eq!(values.len(), sig.values as usize);
            for (v, sent) in values.iter().zip(&req.values) {
                prop_assert!(v.is_finite());
                if let Some(min) = w.min { prop_assert!(*v >= min); }
                if let Some(max) = w.max { prop_assert!(*v <= max); }
                let kind_ok = matches!(
                    (w.ty, sent.kind),
                    (ValueType::F64, Some(pb::value::Kind::F64(_)))
                        | (ValueType::I64, Some(pb::value::Kind::I64(_)))
                        | (ValueType::Bool, Some(pb::value::Kind::Bool(_)))
                );
                prop_assert!(kind_ok, "{:?} accepted for a {} signal", sent, w.ty.as_str());
            }
        } else {
            // Refused: nothing to check beyond not panicking.
        }
    }
}
