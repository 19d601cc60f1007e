//! `--shard i/n`: run the `i`-th of `n` parts of a sweep.
//!
//! Shards are numbered from 1 (`1/4` … `4/4`), as in `cargo nextest
//! --partition count:1/4`: the spelling people say aloud. Shard `i` takes
//! the `i`-th contiguous range of the ordered candidate list, so the lists
//! of shards `1/n`, `2/n`, …, `n/n` concatenated in that order are the full
//! list, element for element. Split the list after everything that orders
//! or limits it (strategy order, constraints, `budget.max_trials`), so that
//! every shard computes the same list before taking its part.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// Part `index` of `count` (`1 <= index <= count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    index: u32,
    count: u32,
}

impl Shard {
    /// Shard `index` of `count`, numbered from 1.
    pub fn new(index: u32, count: u32) -> Result<Shard, String> {
        if count == 0 {
            return Err("the shard count must be at least 1".to_string());
        }
        if index == 0 {
            return Err(format!(
                "shards are numbered from 1: the first of {count} is 1/{count}"
            ));
        }
        if index > count {
            return Err(format!(
                "shard {index}/{count} does not exist: there are {count} shards, 1/{count} to {count}/{count}"
            ));
        }
        Ok(Shard { index, count })
    }

    /// The whole sweep: `1/1`.
    pub fn full() -> Shard {
        Shard { index: 1, count: 1 }
    }

    /// Parse `i/n` (surrounding whitespace allowed, digits only).
    pub fn parse(text: &str) -> Result<Shard, String> {
        let t = text.trim();
        let expected = "expected `i/n` with 1 <= i <= n, e.g. `2/4`";
        let Some((i, n)) = t.split_once('/') else {
            return Err(format!("invalid shard `{text}`: {expected}"));
        };
        let number = |part: &str, what: &str| -> Result<u32, String> {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "invalid shard `{text}`: the {what} `{part}` is not a whole number; {expected}"
                ));
            }
            part.parse::<u32>()
                .map_err(|_| format!("invalid shard `{text}`: the {what} `{part}` is too large"))
        };
        let index = number(i, "shard number")?;
        let count = number(n, "shard count")?;
        Shard::new(index, count).map_err(|e| format!("invalid shard `{text}`: {e}"))
    }

    /// 1-based.
    pub fn index(&self) -> u32 {
        self.index
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// The positions this shard takes from a list of `len`: `[floor((i-1) ·
    /// len / n), floor(i · len / n))`. The ranges of `1/n`..`n/n` tile
    /// `0..len` in order, and their lengths differ by at most one.
    pub fn range(&self, len: usize) -> Range<usize> {
        let at = |k: u32| -> usize {
            // In u128: len · n cannot overflow, and the result is <= len.
            (len as u128 * u128::from(k) / u128::from(self.count)) as usize
        };
        at(self.index - 1)..at(self.index)
    }

    /// This shard's part of `items`.
    pub fn select<'a, T>(&self, items: &'a [T]) -> &'a [T] {
        &items[self.range(items.len())]
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        Shard::parse(s)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_i_of_n() {
        let s = Shard::parse("2/4").unwrap();
        assert_eq!((s.index(), s.count()), (2, 4));
        assert_eq!(s.to_string(), "2/4");
        assert_eq!(" 1/1 ".parse::<Shard>().unwrap(), Shard::full());
        assert_eq!(Shard::parse("4/4").unwrap().index(), 4);
    }

    #[test]
    fn rejects_bad_shards_with_the_reason() {
        let err = |t: &str| Shard::parse(t).unwrap_err();
        assert_eq!(
            err("0/4"),
            "invalid shard `0/4`: shards are numbered from 1: the first of 4 is 1/4"
        );
        assert_eq!(
            err("5/4"),
            "invalid shard `5/4`: shard 5/4 does not exist: there are 4 shards, 1/4 to 4/4"
        );
        assert_eq!(
            err("0/0"),
            "invalid shard `0/0`: the shard count must be at least 1"
        );
        assert!(err("2").contains("expected `i/n` with 1 <= i <= n"));
        assert!(err("").contains("expected `i/n`"));
        assert!(err("a/4").contains("the shard number `a` is not a whole number"));
        assert!(err("2/x").contains("the shard count `x` is not a whole number"));
        assert!(err("2/4/5").contains("the shard count `4/5` is not a whole number"));
        assert!(err("-1/4").contains("not a whole number"));
        assert!(err("+1/4").contains("not a whole number"));
        assert!(err("1 / 4").contains("not a whole number"));
        assert!(err("1/").contains("the shard count `` is not a whole number"));
        assert!(err("1/99999999999").contains("is too large"));
    }

    #[test]
    fn shards_concatenate_to_the_full_list() {
        for len in [0usize, 1, 2, 3, 7, 10, 100, 1001] {
            let items: Vec<usize> = (0..len).collect();
            for n in 1..=12u32 {
                let parts: Vec<&[usize]> = (1..=n)
                    .map(|i| Shard::new(i, n).unwrap().select(&items))
                    .collect();
                assert_eq!(parts.concat(), items, "len {len}, {n} shards");
                let sizes: Vec<usize> = parts.iter().map(|p| p.len()).collect();
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 1, "len {len}, {n} shards: {sizes:?}");
            }
        }
    }

    #[test]
    fn ranges_by_hand() {
        // 10 items in 4 shards: floor(k·10/4) = 0, 2, 5, 7, 10.
        let r: Vec<Range<usize>> = (1..=4)
            .map(|i| Shard::new(i, 4).unwrap().range(10))
            .collect();
        assert_eq!(r, vec![0..2, 2..5, 5..7, 7..10]);
        // More shards than items: some are empty, none overlaps.
        let r: Vec<Range<usize>> = (1..=3)
            .map(|i| Shard::new(i, 3).unwrap().range(2))
            .collect();
        assert_eq!(r, vec![0..0, 0..1, 1..2]);
        assert_eq!(Shard::full().range(usize::MAX), 0..usize::MAX);
        assert_eq!(Shard::new(2, 2).unwrap().range(usize::MAX).end, usize::MAX);
    }
}
