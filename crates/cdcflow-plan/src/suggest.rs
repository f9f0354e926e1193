//! "Did you mean": the known name nearest to a misspelt one, for the help line of an
//! unknown dataset, column, flow, table or configuration key. Names are compared
//! without case (the dialect's names ignore it) by edit distance, where swapping two
//! neighbouring letters is one edit (`nmae` → `name`); a name that needs more than a
//! third of its letters changed is no suggestion (`user` → `users`, not `orders` →
//! `users`).

/// The candidate nearest to `name`, if one is near enough; the first of equals.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = name.to_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let known = candidate.to_lowercase();
        if known == wanted {
            return Some(candidate);
        }
        let distance = edits(&wanted, &known);
        let longest = wanted.chars().count().max(known.chars().count());
        if distance * 3 > longest {
            continue;
        }
        if best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// `did you mean `x`?` when a candidate is near `name`.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    closest(name, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// The optimal-string-alignment distance: insertions, deletions, substitutions and
/// swaps of neighbouring characters.
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows of the distance table: two back, the previous one and the current one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            current[j] = d;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_names_are_suggested_and_far_ones_not() {
        let datasets = ["bronze", "users", "users_history"];
        assert_eq!(closest("user", datasets), Some("users"));
        assert_eq!(closest("USRES", datasets), Some("users"));
        assert_eq!(closest("bronz", datasets), Some("bronze"));
        assert_eq!(closest("orders", datasets), None);
        let columns = ["id", "op", "seq", "name", "city"];
        assert_eq!(closest("nmae", columns), Some("name"), "a swap is one edit");
        assert_eq!(closest("nme", columns), Some("name"));
        assert_eq!(closest("citty", columns), Some("city"));
        assert_eq!(closest("ix", columns), None);
        assert_eq!(closest("x", columns), None);
    }

    #[test]
    fn edits_count_swaps_once() {
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("kitten", "sitting"), 3);
        assert_eq!(edits("nmae", "name"), 1);
        assert_eq!(edits("orders", "users"), 3);
        assert_eq!(edits("same", "same"), 0);
    }
}
