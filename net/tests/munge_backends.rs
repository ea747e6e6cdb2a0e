//! The two MUNGE clients, libmunge (loaded at run time) and the `munge`/`unmunge` programs,
//! against a real private munged: each decodes what the other encoded, and both refuse the same
//! bad credentials with the same MUNGE status.

mod common;

use std::time::Duration;

use common::munged::Munged;
use fabric_net::rendezvous::munge::{Backend, Munge, MungeError};

fn client(m: &Munged, backend: Backend) -> Munge {
    Munge {
        backend,
        ..Munge::with_socket(&m.socket)
    }
}

fn status(e: &MungeError) -> i32 {
    match e {
        MungeError::Rejected { status, .. } | MungeError::Encode { status, .. } => *status,
        other => panic!("expected a MUNGE status, got {other}"),
    }
}

#[test]
fn libmunge_is_loaded_on_a_host_with_munge_installed() {
    // The test machines install munge (scripts/install-deps); a host without libmunge.so.2
    // uses the programs, which the tests below also cover.
    assert_eq!(Backend::best(), Backend::Library);
}

#[test]
fn each_client_decodes_what_the_other_encoded_with_the_same_ids_and_payload() {
    let Some(m) = Munged::start() else { return };
    let (lib, prog) = (client(&m, Backend::Library), client(&m, Backend::Programs));
    let payload = b"{\"job\":42,\"node\":\"n1\",\"note\":\"it's \\\"quoted\\\"\"}\n\0tail";
    let me = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    for (enc, dec) in [(&lib, &prog), (&prog, &lib), (&lib, &lib)] {
        let cred = enc.encode(payload).unwrap();
        assert!(cred.starts_with("MUNGE:"), "{cred}");
        let d = dec.decode(&cred).unwrap();
        assert_eq!((d.uid, d.gid), me);
        assert_eq!(d.payload, payload);
    }
    let empty = lib.encode(b"").unwrap();
    assert_eq!(prog.decode(&empty).unwrap().payload, b"");
}

#[test]
fn both_clients_refuse_a_replayed_a_tampered_and_a_restricted_credential_alike() {
    let Some(m) = Munged::start() else { return };
    let (lib, prog) = (client(&m, Backend::Library), client(&m, Backend::Programs));
    for dec in [&lib, &prog] {
        let cred = lib.encode(b"once").unwrap();
        dec.decode(&cred).unwrap();
        assert_eq!(status(&dec.decode(&cred).unwrap_err()), 17, "replayed");

        let mut tampered = prog.encode(b"payload").unwrap().into_bytes();
        let mid = tampered.len() / 2;
        tampered[mid] = if tampered[mid] == b'A' { b'B' } else { b'A' };
        let err = dec
            .decode(&String::from_utf8(tampered).unwrap())
            .unwrap_err();
        assert!((8..=14).contains(&status(&err)), "tampered: {err}");

        // Restricted to a UID that is not ours: refused even to root.
        let other = nix::unistd::getuid().as_raw() + 4242;
        let restricted = lib.encode_for(b"not yours", Some(other)).unwrap();
        assert_eq!(
            status(&dec.decode(&restricted).unwrap_err()),
            18,
            "unauthorized"
        );
        let mine = prog
            .encode_for(b"yours", Some(nix::unistd::getuid().as_raw()))
            .unwrap();
        assert_eq!(dec.decode(&mine).unwrap().payload, b"yours");
    }
    let err = lib.decode("MUNGE:not-a-credential\0:").unwrap_err();
    assert_eq!(status(&err), 8, "{err}");
}

#[test]
fn a_munged_that_is_not_there_is_an_error_naming_the_socket_problem() {
    let dir = tempfile::tempdir().unwrap();
    let mut lib = Munge::with_socket(dir.path().join("no-munged.socket"));
    lib.backend = Backend::Library;
    lib.timeout = Duration::from_secs(30);
    let err = lib.encode(b"x").unwrap_err();
    assert_eq!(status(&err), 6, "{err}");
    assert!(err.to_string().contains("munge could not encode"), "{err}");
}

#[test]
fn a_munged_that_never_answers_is_a_timeout_for_the_caller_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("silent.socket");
    // Accepts connections and never answers, as a wedged munged would.
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let _held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for c in listener.incoming().flatten() {
            open.push(c);
        }
    });
    let mut lib = Munge::with_socket(&path);
    lib.backend = Backend::Library;
    lib.timeout = Duration::from_millis(300);
    let err = lib.encode(b"x").unwrap_err();
    assert!(matches!(err, MungeError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("libmunge munge_encode"), "{err}");
    let err = lib.decode("MUNGE:AwQFAAA=:").unwrap_err();
    assert!(matches!(err, MungeError::Timeout { .. }), "{err}");
}
