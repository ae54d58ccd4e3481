//! Model names shared per worker: a call's model is named by its request and again by its
//! answer (often a dated snapshot of it), and a gateway's calls mostly name the same few
//! models, so each worker keeps the last [`REMEMBERED`] names it made and hands out
//! another reference to one that matches instead of allocating the name again.

use std::cell::RefCell;
use std::sync::Arc;

/// How many names each worker keeps.
pub const REMEMBERED: usize = 4;

/// The longest name kept (a model's is a few dozen bytes): a request may name anything,
/// and what a worker keeps stays until newer names push it out.
const LONGEST: usize = 256;

thread_local! {
    static LAST: RefCell<Vec<Arc<str>>> = const { RefCell::new(Vec::new()) };
}

/// The name among this thread's last few whose text is `bytes`: found before its bytes
/// are checked as UTF-8 (a name made is).
pub fn remembered(bytes: &[u8]) -> Option<Arc<str>> {
    LAST.with(|last| {
        let last = last.try_borrow().ok()?;
        last.iter().find(|n| n.as_bytes() == bytes).cloned()
    })
}

/// `name` as an `Arc<str>`: one this thread made before when it is among the last few.
pub fn shared(name: &str) -> Arc<str> {
    if name.len() > LONGEST {
        return Arc::from(name);
    }
    LAST.with(|last| {
        let Ok(mut last) = last.try_borrow_mut() else {
            return Arc::from(name);
        };
        if let Some(n) = last.iter().find(|n| ***n == *name) {
            return n.clone();
        }
        let n: Arc<str> = Arc::from(name);
        if last.len() >= REMEMBERED {
            last.pop();
        }
        last.insert(0, n.clone());
        n
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_made_again_is_the_one_made_before_until_it_is_pushed_out() {
        let a = shared("gpt-4o-mini");
        let b = shared("gpt-4o-mini");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*shared("gpt-4o-mini-2025-01-01"), "gpt-4o-mini-2025-01-01");
        for i in 0..REMEMBERED {
            shared(&format!("m{i}"));
        }
        let c = shared("gpt-4o-mini");
        assert_eq!(c, a);
        assert!(!Arc::ptr_eq(&a, &c), "pushed out by newer names");
        assert!(Arc::ptr_eq(&remembered(b"gpt-4o-mini").unwrap(), &c));
        assert_eq!(remembered(b"gpt-4o"), None);
        // A name longer than any model's is made, never kept.
        let long = "m".repeat(LONGEST + 1);
        assert_eq!(&*shared(&long), long);
        assert_eq!(remembered(long.as_bytes()), None);
        assert!(Arc::ptr_eq(&remembered(b"gpt-4o-mini").unwrap(), &c));
    }
}
