//! The simulator's frame parser is untrusted-input code: any bytes, and any mutation of a well-formed
//! frame, are answered or refused, never a panic; a refused frame is left as it was.

use proptest::prelude::*;
use rtcell_ecat::frame::{Command, build};
use rtcell_ecat::segment::Segment;

fn valid_frame() -> impl Strategy<Value = Vec<u8>> {
    let dg = (0u8..15, any::<u8>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..64));
    proptest::collection::vec(dg, 1..6).prop_map(|dgs| {
        let parts: Vec<(Command, u8, u32, Vec<u8>)> =
            dgs.into_iter().map(|(c, i, a, d)| (Command::from_code(c).unwrap_or(Command::Nop), i, a, d)).collect();
        let refs: Vec<(Command, u8, u32, &[u8])> =
            parts.iter().map(|(c, i, a, d)| (*c, *i, *a, d.as_slice())).collect();
        build([0x10; 6], &refs)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_are_answered_or_refused(mut bytes in proptest::collection::vec(any::<u8>(), 0..1600)) {
        let mut seg = Segment::new(3);
        let before = bytes.clone();
        if seg.process(&mut bytes, 0).is_err() {
            prop_assert_eq!(bytes, before);
        }
    }

    #[test]
    fn mutated_frames_are_answered_or_refused(
        frame in valid_frame(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let mut seg = Segment::new(2);
        // Well formed: always answered, the frame keeps its length.
        let mut ok = frame.clone();
        prop_assert!(seg.process(&mut ok, 0).is_ok());
        prop_assert_eq!(ok.len(), frame.len());
        let mut f = frame.clone();
        for (at, v) in flips {
            let i = at % f.len();
            f[i] ^= v;
        }
        f.truncate(cut % (f.len() + 1));
        let before = f.clone();
        if seg.process(&mut f, 0).is_err() {
            prop_assert_eq!(f, before);
        }
    }
}
