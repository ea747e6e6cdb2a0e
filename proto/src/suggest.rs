//! "Did you mean": the known name nearest to a misspelt one, for every configuration reader
//! (the probe's TOML, the cost file, `accept`'s thresholds, the plugin's arguments), so that
//! `[counters.symbol_eror]` is refused with `did you mean symbol_error?` instead of a threshold
//! that silently does nothing.

/// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`, compared
/// case-insensitively (the optimal string alignment distance).
pub fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    // Three rows of the table: two back (for a swap), one back, this one.
    let mut back2 = vec![0usize; b.len() + 1];
    let mut back1: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![0usize; b.len() + 1];
    for i in 1..=a.len() {
        row[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (back1[j] + 1).min(row[j - 1] + 1).min(back1[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(back2[j - 2] + 1);
            }
        }
        std::mem::swap(&mut back2, &mut back1);
        std::mem::swap(&mut back1, &mut row);
    }
    back1[b.len()]
}

/// The known name nearest to `word`, when it is near enough to be what was meant: at most one
/// edit per three characters (at least one edit, at most three). Ties go to the first listed.
pub fn nearest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    let mut best: Option<(usize, &str)> = None;
    for k in known {
        let d = distance(word, k);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k)
}

/// serde's message for an unknown field or variant (`unknown field `pinn`, expected one of
/// `pin`, `drift_severity``) with the nearest expected name added (`; did you mean `pin`?`);
/// any other message unchanged.
pub fn explain(message: &str) -> String {
    let Some(rest) = message
        .find("unknown field `")
        .map(|i| &message[i + "unknown field `".len()..])
        .or_else(|| {
            message
                .find("unknown variant `")
                .map(|i| &message[i + "unknown variant `".len()..])
        })
    else {
        return message.to_string();
    };
    let Some((word, tail)) = rest.split_once('`') else {
        return message.to_string();
    };
    // The expected names are the backquoted words after the unknown one.
    let expected: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
    match nearest(word, expected.iter().copied()) {
        Some(k) => format!("{}; did you mean `{k}`?", message.trim_end()),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_typo_is_one_edit_and_a_swap_too() {
        assert_eq!(distance("symbol_eror", "symbol_error"), 1);
        assert_eq!(distance("symbol_errro", "symbol_error"), 1);
        assert_eq!(distance("LINK_DOWNED", "link_downed"), 0);
        assert_eq!(distance("", "abc"), 3);
    }

    #[test]
    fn the_nearest_name_is_suggested_only_when_it_is_near() {
        let known = ["symbol_error", "link_downed", "port_rcv_errors"];
        assert_eq!(nearest("symbol_eror", known), Some("symbol_error"));
        assert_eq!(nearest("link_downd", known), Some("link_downed"));
        assert_eq!(nearest("np_cnp_sent", known), None);
        assert_eq!(nearest("x", ["y", "xy"]), Some("y"));
    }

    #[test]
    fn serdes_unknown_field_message_gets_the_nearest_expected_name() {
        assert_eq!(
            explain("unknown field `pinn`, expected `pin` or `drift_severity`"),
            "unknown field `pinn`, expected `pin` or `drift_severity`; did you mean `pin`?"
        );
        assert_eq!(
            explain("unknown variant `fial`, expected one of `info`, `warn`, `fail`"),
            "unknown variant `fial`, expected one of `info`, `warn`, `fail`; did you mean `fail`?"
        );
        assert_eq!(
            explain("unknown field `zzzzzz`, expected `pin`"),
            "unknown field `zzzzzz`, expected `pin`"
        );
        assert_eq!(explain("invalid type"), "invalid type");
    }
}
