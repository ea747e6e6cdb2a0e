//! The report's charts fit their data at every scale: the same history priced at a few hundred,
//! tens of thousands and tens of millions gives axis labels in EUR, k EUR and M EUR, with the
//! decimals the tick spacing needs and no label twice (a cost axis once read "0k, 0k, 0k" under
//! a thousand).

use assert_cmd::Command;

/// The hand-computed history's cost file with every amount multiplied by `factor`.
fn cost_file(factor: f64) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/sacct/hand/cost.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        // Amounts are quoted decimals (`price = "876000"`, `rate_per_hour = "100"`); hours
        // are quoted too and stay as they are.
        if line.contains("hours_per") {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let mut parts = line.split('"');
        let mut l = parts.next().unwrap_or_default().to_string();
        for (i, p) in parts.enumerate() {
            l.push('"');
            match p.parse::<f64>() {
                Ok(v) if i % 2 == 0 => l.push_str(&format!("{}", v * factor)),
                _ => l.push_str(p),
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The texts of one chart of the HTML report.
fn chart_texts(html: &str, id: &str) -> Vec<String> {
    let start = html.find(&format!("<figure id=\"{id}\"")).unwrap();
    let end = start + html[start..].find("</figure>").unwrap();
    html[start..end]
        .split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

fn render(factor: f64) -> String {
    let dir = tempfile::tempdir().unwrap();
    let cost = dir.path().join("cost.toml");
    std::fs::write(&cost, cost_file(factor)).unwrap();
    let history = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/sacct/hand/history.txt"
    );
    let out = Command::cargo_bin("fabric-check")
        .unwrap()
        .args(["report", "-f", "html", "-i", history, "--cost"])
        .arg(&cost)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_cost_axes_take_the_unit_and_decimals_their_range_needs_at_three_scales() {
    // The hand history costs 650 EUR on ib at factor 1.
    for (factor, unit) in [(1.0, "EUR"), (100.0, "k EUR"), (100_000.0, "M EUR")] {
        let html = render(factor);
        for (id, desc) in [
            ("chart-cost", format!("{unit} over the window")),
            ("chart-cost-time", format!("{unit} per accepted run")),
        ] {
            let texts = chart_texts(&html, id);
            assert!(texts.contains(&desc), "{factor}: {id}: {texts:?}");
            let labels: Vec<&String> = texts.iter().filter(|t| t.parse::<f64>().is_ok()).collect();
            assert!(labels.len() >= 4, "{factor}: {id}: {labels:?}");
            let mut distinct = labels.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), labels.len(), "{factor}: {id}: {labels:?}");
            // The unit keeps every number under ten thousand.
            let top = labels
                .iter()
                .map(|l| l.parse::<f64>().unwrap())
                .fold(0.0, f64::max);
            assert!(top > 0.0 && top < 10_000.0, "{factor}: {id}: {labels:?}");
            assert!(!texts.iter().any(|t| t.ends_with('k')), "{texts:?}");
        }
    }
    // At factor 1, the cost axis counts in hundreds of EUR, as printed.
    let texts = chart_texts(&render(1.0), "chart-cost");
    assert!(
        texts.windows(3).any(|w| w == ["0", "100", "200"]),
        "{texts:?}"
    );
}

#[test]
fn a_window_of_one_day_labels_each_day_once() {
    let html = render(1.0);
    let texts = chart_texts(&html, "chart-drains");
    let days: Vec<&String> = texts.iter().filter(|t| t.starts_with("05-")).collect();
    assert_eq!(days, ["05-01", "05-02"], "{texts:?}");
}
