//! A node list from a job's environment, read as the plugin reads `SLURM_STEP_NODELIST` in
//! slurmstepd: the input's first two bytes are Slurm's node count (0 to 4096), the rest the
//! list. Parsed within that count (a range of more numbers refused as it is read), counted in
//! names and bytes with checked arithmetic before anything is expanded, and expanded to exactly
//! that many names of exactly those bytes; the plain parse and default expansion of the same
//! text count first too, and agree.
#![no_main]
use fabric_proto::hostlist::{Hostlist, HostlistError, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Some((head, rest)) = bytes.split_first_chunk::<2>() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let names = u64::from(u16::from_le_bytes(*head) % 4097);
    let limits = Limits {
        names,
        bytes: names * 255,
    };
    match Hostlist::parse_within(text, limits) {
        Ok(h) => {
            let count = h.count().expect("a list parsed within limits is counted");
            let size = h.expanded_bytes().expect("a list parsed within limits is counted");
            assert!(count <= limits.names && size <= limits.bytes, "{text:?}");
            let all = h
                .expand_within(limits)
                .expect("a list parsed within its limits expands within them");
            assert_eq!(all.len() as u64, count, "{text:?}");
            assert_eq!(all.iter().map(|n| n.len() as u64).sum::<u64>(), size, "{text:?}");
        }
        Err(
            HostlistError::RangeTooLarge { .. }
            | HostlistError::TooLarge { .. }
            | HostlistError::TooLong { .. },
        ) => {
            // Refused for its size, as soon as a range over the count is read: a syntax error
            // later in the list is not reached (`x[0001-1023][u0000-1023]` with a count of 2).
            // Where the plain parse reads the whole list, it will not expand it within limits.
            if let Ok(h) = Hostlist::parse(text) {
                assert!(h.expand_within(limits).is_err(), "{text:?}");
            }
        }
        Err(_) => assert!(Hostlist::parse(text).is_err(), "{text:?}"),
    }
    if let Ok(h) = Hostlist::parse(text) {
        let (count, size) = (h.count(), h.expanded_bytes());
        let fits = count.is_some_and(|n| n <= Limits::DEFAULT.names)
            && size.is_some_and(|b| b <= Limits::DEFAULT.bytes);
        match h.expand() {
            Ok(all) => {
                assert!(fits, "{text:?}");
                assert_eq!(Some(all.len() as u64), count, "{text:?}");
            }
            Err(_) => assert!(!fits, "{text:?}"),
        }
    }
});
