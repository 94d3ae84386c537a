//! `rtcell bench gateway` end to end with short phases: every phase is in the results document, and the
//! misbehaving clients did what they are there for (idle sockets opened, streams opened, requests
//! refused with a gRPC status). Counts and presence only, never timings.

mod common;

#[test]
fn bench_gateway_has_a_misbehaving_phase_with_its_counts() {
    // The misbehaving clients connect from loopback addresses of their own.
    let lo2 = std::net::TcpListener::bind("127.0.0.2:0").is_ok();
    rtcell_testkit::require!(lo2, "127.0.0.2 cannot be bound (the loopback interface has no 127/8)");
    let _cpu = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let scenario = common::repo().join("examples/offload.toml");
    let o = common::rtcell()
        .args(["bench", "gateway", "--phase", "2s", "--scenario", scenario.to_str().unwrap(), "--out"])
        .arg(&out)
        .output()
        .expect("rtcell runs");
    let text = common::text(&o);
    assert!(o.status.success(), "{text}");
    let doc = common::valid_results(&out);
    let suite = &doc["suites"][0];
    assert_eq!(suite["suite"], "gateway", "{text}");
    let names: Vec<&str> =
        suite["config"]["phases"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["idle 1", "loaded", "idle 2", "misbehaving", "idle 3"], "{text}");
    for p in suite["config"]["phases"].as_array().unwrap() {
        assert!(p["cycles"].as_u64() > Some(0), "{p}");
        assert!(p["gateway_rss_bytes"]["start"].as_u64() > Some(0), "{p}");
        assert!(p["gateway_rss_bytes"]["end"].as_u64() > Some(0), "{p}");
    }
    let m = &suite["config"]["misbehaving"];
    for what in ["idle_sockets_opened", "stream_connections", "streams_opened"] {
        assert!(m[what].as_u64() > Some(0), "{what}: {m}");
    }
    let refused: u64 = m["refused_requests_by_code"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum();
    assert!(refused > 0, "{m}");
    assert_eq!(m["refused_requests_by_code"].get("ok"), None, "a request that must be refused was accepted: {m}");
    // The judged task's series for the misbehaving phase, and its verdict.
    let series = common::series(&doc);
    for name in ["activation_latency", "overruns", "good_client_get_status"] {
        assert!(
            series.iter().any(|s| s["name"] == name && s["labels"]["phase"] == "misbehaving"),
            "no {name} series of the misbehaving phase"
        );
    }
    assert!(suite["config"]["verdict"]["misbehaving"]["overruns"]["met"].is_boolean(), "{}", suite["config"]);
    assert!(text.contains("Verdict misbehaving:"), "{text}");
    assert!(text.contains("Misbehaving clients"), "{text}");
    // The scenario's own results are named where the user finds them, not by the run's descriptor.
    let own = suite["config"]["scenario_results"].as_str().unwrap();
    assert_eq!(std::path::Path::new(own), out.join("gateway-run/scenario/results.json"), "{text}");
    assert!(std::path::Path::new(own).is_file(), "{own}");
}
