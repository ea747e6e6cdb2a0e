//! A small Slurm hostlist expander for `--nodes` (`n[1-4]`, `gpu[01-03,07],login1`).
//!
//! Private stand-in until the shared [`crate::hostlist`] module lands; the lead can switch
//! `expand` to it. Only one bracket group per name is supported here.

/// Expands a hostlist expression into node names, in order, or says what is wrong with it.
pub fn expand(expr: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top(expr)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some(open) = item.find('[') else {
            out.push(item.to_string());
            continue;
        };
        let close = item
            .rfind(']')
            .ok_or_else(|| format!("unclosed '[' in {item:?}"))?;
        let (prefix, body, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
        if body.contains('[') || suffix.contains('[') {
            return Err(format!(
                "only one bracket group per name is supported: {item:?}"
            ));
        }
        for range in body.split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let width = lo.len();
            let (a, b): (u64, u64) = (
                lo.parse()
                    .map_err(|_| format!("bad number {lo:?} in {item:?}"))?,
                hi.parse()
                    .map_err(|_| format!("bad number {hi:?} in {item:?}"))?,
            );
            if a > b {
                return Err(format!("range {range:?} runs backwards in {item:?}"));
            }
            if b - a > 100_000 {
                return Err(format!("range {range:?} is too large"));
            }
            for i in a..=b {
                out.push(format!("{prefix}{i:0width$}{suffix}"));
            }
        }
    }
    if out.is_empty() {
        return Err("the node list is empty".into());
    }
    Ok(out)
}

fn split_top(expr: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(format!("unbalanced ']' in {expr:?}"));
        }
    }
    if depth != 0 {
        return Err(format!("unclosed '[' in {expr:?}"));
    }
    parts.push(&expr[start..]);
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_keep_zero_padding_and_order() {
        assert_eq!(
            expand("gpu[08-10],login1").unwrap(),
            ["gpu08", "gpu09", "gpu10", "login1"]
        );
        assert_eq!(expand("n[1-2,4]").unwrap(), ["n1", "n2", "n4"]);
    }

    #[test]
    fn an_unclosed_bracket_is_an_error_naming_the_expression() {
        assert!(expand("n[1-4").unwrap_err().contains("unclosed"));
        assert!(expand("n[4-1]").unwrap_err().contains("backwards"));
    }
}
