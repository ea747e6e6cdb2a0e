//! `bom.drift`: the node's bill of materials matches the pinned one.
//!
//! Compares [`Snapshot::bom`](crate::probe::gather::Snapshot::bom) with a BOM written by `fabric-check bom --pin`
//! (`--bom-pin FILE`, or `[bom] pin` / `bom_pin` in the config) and names each change: the
//! acceptance guide says to re-test when firmware, driver, kernel, NIC or GPU model, link rate
//! or MTU changes. Each change is a `warn` by default (`[bom] drift_severity = "fail"` drains).
//! A pinned item missing now because its device's files could not be read is `info` "not
//! verified", not drift.

use serde_json::json;

use super::Ctx;
use crate::probe::Finding;
use fabric_base::bom;

/// The check id.
pub const ID: &str = fabric_proto::check_id::BOM_DRIFT;

/// Runs the check.
pub fn check(ctx: &Ctx<'_>) -> Vec<Finding> {
    let Some(pin) = ctx.bom_pin else {
        return Vec::new();
    };
    bom::diff(pin, ctx.bom_now)
        .into_iter()
        .map(|c| {
            let (device, port) = bom::key_subject(&c.key);
            let unread = c.now.is_none()
                && ctx
                    .snap
                    .problems
                    .iter()
                    .any(|p| p.unreadable && p.device.is_some() && p.device == device);
            if unread {
                return Finding::new(
                    ID,
                    crate::probe::Severity::Info,
                    device.as_deref(),
                    port,
                    json!(c.now),
                    json!(c.pinned),
                    format!(
                        "not verified: {} could not be read this run (see the finding naming the file); pinned {}",
                        c.key,
                        c.pinned.as_deref().unwrap_or("nothing")
                    ),
                );
            }
            Finding::new(
                ID,
                ctx.expect.drift_severity,
                device.as_deref(),
                port,
                json!(c.now),
                json!(c.pinned),
                c.describe(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::probe::Severity;

    #[test]
    fn a_firmware_change_is_named() {
        let mut s = ib_node(2);
        s.devices[1].fw_ver = Some("28.39.1002".into());
        let pin = s.bom("n1");
        s.devices[1].fw_ver = Some("28.40.1000".into());
        let now = s.bom("n1");
        let cnow = crate::probe::CounterSnapshot::from_snapshot(&s);
        let e = Default::default();
        let f = check(&Ctx {
            node: "n1",
            snap: &s,
            expect: &e,
            now: &cnow,
            baseline: None,
            rate_window: None,
            bom_now: &now,
            bom_pin: Some(&pin),
            known: None,
        });
        assert_eq!(brief(&f), [(Severity::Warn, Some("mlx5_1".into()), None)]);
        assert!(
            f[0].message.contains("28.39.1002") && f[0].message.contains("28.40.1000"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn without_a_pin_nothing_is_judged() {
        assert!(run(&ib_node(2), check).is_empty());
    }
}
