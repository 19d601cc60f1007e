//! Host patterns: one inventory entry for many hosts
//! (`host: gpu[01-16].example.org`).
//!
//! A pattern holds one or more bracket groups of numbers: ranges `a-b` and
//! single numbers, separated by commas (`[1,3,5-7]`). A range keeps the
//! width of its first bound when that starts with a zero (`[01-16]` gives
//! `01` … `16`). Several groups expand as their product, the last group
//! varying fastest. Brackets holding anything else (an IPv6 literal such as
//! `[::1]`) are not a pattern.

/// At most this many hosts from one pattern: a typo such as `[1-100000]`
/// is an error, not a hundred thousand connections.
pub const MAX_HOSTS: usize = 1024;

/// One host of a pattern: its destination, and the numbers it took, which
/// name it in the inventory (`<entry name>-<tag>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    pub host: String,
    pub tag: String,
}

/// A piece of a pattern: literal text, or the values of one bracket group.
enum Piece<'a> {
    Text(&'a str),
    Choice(Vec<String>),
}

/// The numbers of one bracket group's inside (`01-16`, `1,3,5-7`), or
/// `None` when it is not a group of numbers at all.
fn group(inside: &str) -> Option<Result<Vec<String>, String>> {
    if inside.is_empty()
        || !inside
            .chars()
            .all(|c| c.is_ascii_digit() || c == '-' || c == ',')
    {
        return None;
    }
    let mut out = Vec::new();
    for part in inside.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        if lo.is_empty() || hi.is_empty() || hi.contains('-') {
            return Some(Err(format!(
                "`[{inside}]`: `{part}` is not a number or a range `a-b`"
            )));
        }
        let (Ok(a), Ok(b)) = (lo.parse::<u64>(), hi.parse::<u64>()) else {
            return Some(Err(format!("`[{inside}]`: `{part}` is too large")));
        };
        if a > b {
            return Some(Err(format!(
                "`[{inside}]`: the range `{part}` runs backwards"
            )));
        }
        if b - a >= MAX_HOSTS as u64 {
            return Some(Err(format!(
                "`[{inside}]`: `{part}` names more than {MAX_HOSTS} hosts"
            )));
        }
        // `01-16` keeps two digits; `1-16` does not pad.
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Some(Ok(out))
}

/// The hosts `pattern` names, in order, or `Ok(None)` when it holds no
/// bracket group of numbers (a plain host name). An error says what is
/// wrong with the pattern.
pub fn expand(pattern: &str) -> Result<Option<Vec<Expanded>>, String> {
    let mut pieces = Vec::new();
    let mut rest = pattern;
    let mut any = false;
    while let Some(open) = rest.find('[') {
        let Some(len) = rest[open..].find(']') else {
            break;
        };
        let inside = &rest[open + 1..open + len];
        match group(inside) {
            None => {
                // Not ours (an IPv6 literal): literal text.
                pieces.push(Piece::Text(&rest[..open + len + 1]));
            }
            Some(Err(e)) => return Err(e),
            Some(Ok(values)) => {
                pieces.push(Piece::Text(&rest[..open]));
                pieces.push(Piece::Choice(values));
                any = true;
            }
        }
        rest = &rest[open + len + 1..];
    }
    pieces.push(Piece::Text(rest));
    if !any {
        return Ok(None);
    }
    let total = pieces.iter().try_fold(1usize, |n, p| match p {
        Piece::Choice(v) => n.checked_mul(v.len()).filter(|&t| t <= MAX_HOSTS),
        Piece::Text(_) => Some(n),
    });
    if total.is_none() {
        return Err(format!("`{pattern}` names more than {MAX_HOSTS} hosts"));
    }
    let mut out = vec![Expanded {
        host: String::new(),
        tag: String::new(),
    }];
    for p in &pieces {
        match p {
            Piece::Text(t) => out.iter_mut().for_each(|e| e.host.push_str(t)),
            Piece::Choice(values) => {
                out = out
                    .into_iter()
                    .flat_map(|e| {
                        values.iter().map(move |v| Expanded {
                            host: format!("{}{v}", e.host),
                            tag: if e.tag.is_empty() {
                                v.clone()
                            } else {
                                format!("{}-{v}", e.tag)
                            },
                        })
                    })
                    .collect();
            }
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(p: &str) -> Vec<(String, String)> {
        expand(p)
            .expect("a valid pattern")
            .expect("a pattern")
            .into_iter()
            .map(|e| (e.host, e.tag))
            .collect()
    }

    #[test]
    fn ranges_keep_their_width_and_lists_mix_with_ranges() {
        let h = hosts("gpu[01-03].example.org");
        assert_eq!(
            h,
            [
                ("gpu01.example.org".into(), "01".into()),
                ("gpu02.example.org".into(), "02".into()),
                ("gpu03.example.org".into(), "03".into()),
            ]
        );
        let h: Vec<String> = hosts("n[1,3,8-10]").into_iter().map(|(h, _)| h).collect();
        assert_eq!(h, ["n1", "n3", "n8", "n9", "n10"]);
        assert_eq!(hosts("10.0.0.[7]"), [("10.0.0.7".into(), "7".into())]);
    }

    #[test]
    fn several_groups_expand_as_their_product() {
        let h = hosts("rack[1-2]-gpu[1-2]");
        assert_eq!(
            h,
            [
                ("rack1-gpu1".into(), "1-1".into()),
                ("rack1-gpu2".into(), "1-2".into()),
                ("rack2-gpu1".into(), "2-1".into()),
                ("rack2-gpu2".into(), "2-2".into()),
            ]
        );
    }

    #[test]
    fn plain_hosts_and_ipv6_literals_are_not_patterns() {
        assert_eq!(expand("gpu01.example.org"), Ok(None));
        assert_eq!(expand("[::1]"), Ok(None));
        assert_eq!(expand("user@[fe80::1]:22"), Ok(None));
        assert_eq!(expand("odd[name"), Ok(None));
    }

    #[test]
    fn bad_groups_say_what_is_wrong() {
        for (p, says) in [
            ("gpu[5-2]", "runs backwards"),
            ("gpu[1--3]", "not a number or a range"),
            ("gpu[1,]", "not a number or a range"),
            ("gpu[0-99999]", "more than 1024 hosts"),
            ("a[1-64]b[1-64]", "more than 1024 hosts"),
            ("gpu[99999999999999999999-1]", "too large"),
        ] {
            let e = expand(p).expect_err(p);
            assert!(e.contains(says), "{p}: {e}");
        }
    }
}
