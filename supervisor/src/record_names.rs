//! The names in a records directory, read and written by one rule on both sides: the
//! supervisor that keeps the records and the host that reads a stopped sandbox's storage.
//!
//! - A record is the directory `iteration-N`, `N` in canonical decimal: ASCII digits, no sign,
//!   no leading zero, at least 1, at most `u32::MAX`. Any other name (`iteration-007`,
//!   `iteration-0`, `iteration-+6`, `iteration-7x`) is not a record: a name the supervisor never
//!   writes cannot alias one it did (`iteration-07` and `iteration-7` are never the same
//!   iteration).
//! - `.collected` lists the iterations the host collected, one canonical number a line; any
//!   other line is ignored.

use std::collections::BTreeSet;

/// The file of the records directory listing the collected iterations.
pub const COLLECTED_FILE: &str = ".collected";

/// The result record in a record directory: its presence (a regular file) marks the record
/// finished.
pub const RESULT_FILE: &str = "result.json";

/// The prefix of a record directory's name.
const ITERATION_PREFIX: &str = "iteration-";

/// The name of iteration `n`'s record directory.
pub fn iteration_dir_name(n: u32) -> String {
    format!("{ITERATION_PREFIX}{n}")
}

/// The iteration number a records-directory entry named `name` holds, when it is a record
/// directory's name (`iteration-N`, `N` canonical: see [`iteration_number`]).
pub fn parse_iteration_dir(name: &str) -> Option<u32> {
    iteration_number(name.strip_prefix(ITERATION_PREFIX)?)
}

/// `text` as an iteration number: canonical decimal (ASCII digits, no sign, no leading zero,
/// no surrounding space), from 1 to `u32::MAX`.
pub fn iteration_number(text: &str) -> Option<u32> {
    let canonical =
        !text.is_empty() && !text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit());
    if !canonical {
        return None;
    }
    text.parse().ok()
}

/// The iterations a `.collected` file's `text` lists (a canonical number a line; other lines
/// are ignored).
pub fn parse_collected(text: &str) -> BTreeSet<u32> {
    text.lines().filter_map(iteration_number).collect()
}

/// The lines of a `.collected` file listing `iterations`.
pub fn collected_lines(iterations: impl IntoIterator<Item = u32>) -> String {
    iterations.into_iter().map(|n| format!("{n}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_name_is_canonical_decimal() {
        assert_eq!(parse_iteration_dir("iteration-1"), Some(1));
        assert_eq!(parse_iteration_dir("iteration-42"), Some(42));
        assert_eq!(parse_iteration_dir("iteration-4294967295"), Some(u32::MAX));
        for not_a_record in [
            "iteration-007",
            "iteration-0",
            "iteration-00",
            "iteration-4294967296",
            "iteration-99999999999999999999",
            "iteration-7x",
            "iteration-7 ",
            "iteration- 7",
            "iteration-+6",
            "iteration--6",
            "iteration-",
            "iteration-٣",
            "iteration_7",
            "Iteration-7",
            "7",
        ] {
            assert_eq!(parse_iteration_dir(not_a_record), None, "{not_a_record}");
        }
    }

    #[test]
    fn names_written_are_names_read() {
        for n in [1, 9, 10, 1000, u32::MAX] {
            assert_eq!(parse_iteration_dir(&iteration_dir_name(n)), Some(n));
        }
    }

    #[test]
    fn collected_lists_canonical_numbers_and_ignores_the_rest() {
        let text = "1\n07\n0\nx\n3\n 4\n5 \n+6\n4294967296\n8\r\n9\n3\n";
        assert_eq!(parse_collected(text), BTreeSet::from([1, 3, 8, 9]));
        let set = BTreeSet::from([2, 5, 11]);
        assert_eq!(parse_collected(&collected_lines(set.iter().copied())), set);
        assert_eq!(collected_lines([3, 1]), "3\n1\n");
    }
}
