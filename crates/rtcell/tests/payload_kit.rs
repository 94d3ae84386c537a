//! `rtcell sdk payload-kit`: the kvm payload kit written under a prefix.

mod common;

#[test]
fn the_payload_kit_is_written_under_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("sdk");
    let o = common::run(&["sdk", "payload-kit", "--prefix", prefix.to_str().unwrap()]);
    let text = common::text(&o);
    assert!(o.status.success(), "{text}");
    for (rel, bytes) in rtcell_kvm::sdk::files() {
        let path = prefix.join(rel);
        assert!(text.contains(&format!("wrote {}", path.display())), "{rel} not reported: {text}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{rel}");
    }
    // A prefix that cannot be made: a file is in the way.
    let blocked = dir.path().join("file");
    std::fs::write(&blocked, "x").unwrap();
    let o = common::run(&["sdk", "payload-kit", "--prefix", blocked.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", common::text(&o));
    assert!(common::text(&o).contains("error: writing the payload kit"), "{}", common::text(&o));
}
