//! AdminComment: any comment, with our segment spliced in, gives back exactly our tag, and keeps
//! the other tools' text.
#![no_main]
use fabric_proto::tag::{JobTag, extract, splice};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|comment: &str| {
    let _ = extract(comment);
    let tag = JobTag::default();
    let spliced = splice(comment, &tag);
    match extract(&spliced) {
        Some(Ok(back)) => assert_eq!(back.verdict, tag.verdict),
        other => panic!("splice({comment:?}) then extract gave {other:?}"),
    }
});
