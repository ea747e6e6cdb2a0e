mod real_world_support;
use real_world_support::{corpus};
#[test]
fn dump() {
    let c = corpus().join("sacct");
    let mut files: Vec<_> = walk(&c);
    files.sort();
    for f in files {
        let name = f.strip_prefix(&c).unwrap().display().to_string();
        let bytes = std::fs::File::open(&f).unwrap();
        let r = if name.ends_with(".json") {
            fabric_report::report::sacct_json::read_all(bytes, &name)
        } else {
            fabric_report::report::sacct_text::read_all(std::io::BufReader::new(bytes), &name)
        };
        match r {
            Ok(v) => { println!("== {name}: {} records", v.len()); for j in v.iter().take(4) { println!("   {} {:?} gpus={:?} nodes={} start={} end={} elapsed={} part={}", j.job_id, j.state, j.gpus, j.nnodes, j.start_s, j.end_s, j.elapsed_s, j.partition); } }
            Err(e) => println!("== {name}: ERROR {e}"),
        }
    }
}
fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(d).unwrap() { let p = e.unwrap().path(); if p.is_dir() { v.extend(walk(&p)); } else { v.push(p); } }
    v
}
