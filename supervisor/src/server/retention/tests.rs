use super::*;
use crate::server::claim::read_collected;

/// A records directory holding `iteration-N` for each of `sizes` (N from 1), each with a
/// `result.json` of that many bytes, all listed in `.collected` but those in `uncollected`.
fn records(sizes: &[usize], uncollected: &[u32]) -> (tempfile::TempDir, BTreeSet<u32>) {
    let dir = tempfile::tempdir().unwrap();
    let mut collected = BTreeSet::new();
    for (i, size) in sizes.iter().enumerate() {
        let n = u32::try_from(i + 1).unwrap();
        let rec = iteration_dir(dir.path(), n);
        std::fs::create_dir_all(rec.join("output")).unwrap();
        std::fs::write(rec.join("result.json"), vec![b'x'; *size]).unwrap();
        if !uncollected.contains(&n) {
            collected.insert(n);
        }
    }
    let text: String = collected.iter().map(|n| format!("{n}\n")).collect();
    std::fs::write(dir.path().join(COLLECTED_FILE), text).unwrap();
    (dir, collected)
}

fn present(dir: &Path) -> Vec<u32> {
    let mut found: Vec<u32> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_str()?
                .strip_prefix("iteration-")?
                .parse()
                .ok()
        })
        .collect();
    found.sort_unstable();
    found
}

#[test]
fn the_newest_collected_records_are_kept_by_count_and_uncollected_ones_never_go() {
    let (dir, mut collected) = records(&[10; 8], &[2, 5]);
    let retention = Retention {
        records: 2,
        bytes: u64::MAX,
    };
    let mut pruned = Pruned::default();
    let deleted = prune(
        dir.path(),
        &retention,
        &mut collected,
        &|n| n == 8,
        &mut pruned,
    );
    // 8 is protected (running), 7 and 6 kept; 4, 3, 1 deleted; 2 and 5 were never collected.
    assert_eq!(deleted, 3);
    assert_eq!(present(dir.path()), vec![2, 5, 6, 7, 8]);
    assert_eq!(pruned.records, 3);
    assert!(pruned.bytes > 0);
    // `.collected` lists what is kept (the highest, 8, with them).
    let listed = read_collected(dir.path());
    assert_eq!(listed, BTreeSet::from([6, 7, 8]));
    assert_eq!(collected, listed);
    // Pruning again changes nothing; once 8 ends, it counts and 6 goes.
    assert_eq!(
        prune(
            dir.path(),
            &retention,
            &mut collected,
            &|n| n == 8,
            &mut pruned
        ),
        0
    );
    assert_eq!(present(dir.path()), vec![2, 5, 6, 7, 8]);
    prune(
        dir.path(),
        &retention,
        &mut collected,
        &|_| false,
        &mut pruned,
    );
    assert_eq!(present(dir.path()), vec![2, 5, 7, 8]);
}

#[test]
fn the_size_bound_deletes_everything_older_than_the_first_record_past_it() {
    // Allocated sizes: each record is at least its directory, `output/` and a block of data.
    let (dir, mut collected) = records(&[100, 100, 200_000, 100, 100], &[]);
    let one = tree_bytes(&iteration_dir(dir.path(), 5));
    let retention = Retention {
        records: 100,
        bytes: 2 * one + one / 2,
    };
    let mut pruned = Pruned::default();
    prune(
        dir.path(),
        &retention,
        &mut collected,
        &|_| false,
        &mut pruned,
    );
    assert_eq!(present(dir.path()), vec![4, 5]);
    // Nothing kept: the highest number is still listed, so numbering never restarts.
    let retention = Retention {
        records: 0,
        bytes: u64::MAX,
    };
    prune(
        dir.path(),
        &retention,
        &mut collected,
        &|_| false,
        &mut pruned,
    );
    assert!(present(dir.path()).is_empty());
    assert_eq!(read_collected(dir.path()), BTreeSet::from([5]));
    assert_eq!(pruned.records, 5);
}
