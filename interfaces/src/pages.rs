//! Pagination of the VMI's and VHI's lists, as Google's AIP-158 describes
//! it (a server pages with [`page`]; a client reads every page with
//! [`all`]): a page holds at most `page_size` items (0: [`DEFAULT_PAGE_SIZE`]; more than
//! [`MAX_PAGE_SIZE`]: that many), in the list's order; `next_page_token`
//! is empty on the last page. A token is the hex of the last item's sort
//! key, so a page starts after that item even when items were added or
//! removed since the previous page.

// Errors are tonic's `Status`, as the gRPC handlers return them.
#![allow(clippy::result_large_err)]

use std::future::Future;

use tonic::{Response, Status};

/// Items in a page when the request gives no `page_size`.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// The most items in a page, whatever the request asks for.
pub const MAX_PAGE_SIZE: usize = 1000;
/// What every token starts with (its format's version).
const TOKEN_PREFIX: &str = "p1/";

/// The page of `items` that `page_size` and `page_token` ask for, in the
/// order of `key` (each item's sort key, unique in the list), and the
/// token of the next page (empty: none). Errors (InvalidArgument, naming
/// the field): a negative `page_size`, or a token this server did not give.
pub fn page<T>(mut items: Vec<T>, key: impl Fn(&T) -> String, page_size: i32, page_token: &str) -> Result<(Vec<T>, String), Status> {
    let size = match usize::try_from(page_size) {
        Err(_) => return Err(Status::invalid_argument(format!("field `page_size`: {page_size} is negative"))),
        Ok(0) => DEFAULT_PAGE_SIZE,
        Ok(n) => n.min(MAX_PAGE_SIZE),
    };
    let after = after(page_token)?;
    items.sort_by_cached_key(|i| key(i));
    let start = after.map_or(0, |after| items.partition_point(|i| key(i) <= after));
    let rest = items.len() - start;
    let page: Vec<T> = items.into_iter().skip(start).take(size).collect();
    let next = if rest > size {
        page.last()
            .map(|last| hex::encode(format!("{TOKEN_PREFIX}{}", key(last))))
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok((page, next))
}

/// [`page`] of a list its server reads in key order (a store's keys)
/// instead of holding it whole: `read(after, n)` gives the first `n`
/// items whose key is greater than `after` (`None`: from the first), in
/// key order, so that a page reads a page and one item more, not the
/// list. The same page and token as [`page`] over the whole list. Errors:
/// as [`page`], or `read`'s.
pub fn page_read<T>(
    key: impl Fn(&T) -> String,
    page_size: i32,
    page_token: &str,
    read: impl FnOnce(Option<&str>, usize) -> Result<Vec<T>, Status>,
) -> Result<(Vec<T>, String), Status> {
    let size = match usize::try_from(page_size) {
        Err(_) => return Err(Status::invalid_argument(format!("field `page_size`: {page_size} is negative"))),
        Ok(0) => DEFAULT_PAGE_SIZE,
        Ok(n) => n.min(MAX_PAGE_SIZE),
    };
    let after = after(page_token)?;
    let mut items = read(after.as_deref(), size + 1)?;
    let next = if items.len() > size {
        items.truncate(size);
        items
            .last()
            .map(|last| hex::encode(format!("{TOKEN_PREFIX}{}", key(last))))
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok((items, next))
}

/// Every item of a list, read page after page: `call` asks for the page
/// of a token (empty: the first), `split` takes a page's items and the
/// next token. Errors: the server's, or a server that gives the same
/// token again (the list would never end).
pub async fn all<R, T, Fut>(mut call: impl FnMut(String) -> Fut, split: impl Fn(R) -> (Vec<T>, String)) -> Result<Vec<T>, Status>
where
    Fut: Future<Output = Result<Response<R>, Status>>,
{
    let (mut items, mut token) = (Vec::new(), String::new());
    loop {
        let (mut page, next) = split(call(token.clone()).await?.into_inner());
        items.append(&mut page);
        if next.is_empty() {
            return Ok(items);
        }
        if next == token {
            return Err(Status::internal("the server gave the same page token twice"));
        }
        token = next;
    }
}

/// The sort key after which the page of `token` starts; None for the
/// first page.
fn after(token: &str) -> Result<Option<String>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    hex::decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.strip_prefix(TOKEN_PREFIX).map(str::to_string))
        .map(Some)
        .ok_or_else(|| Status::invalid_argument("field `page_token`: not a next_page_token of this list"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("id-{i:03}")).collect()
    }

    fn all_pages(items: Vec<String>, size: i32) -> Vec<Vec<String>> {
        let mut pages = vec![];
        let mut token = String::new();
        loop {
            let (p, next) = page(items.clone(), String::clone, size, &token).unwrap();
            pages.push(p);
            if next.is_empty() {
                return pages;
            }
            token = next;
        }
    }

    #[test]
    fn pages_cover_the_list_once_in_order() {
        let pages = all_pages(ids(7), 3);
        assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
        assert_eq!(pages.concat(), ids(7));
        // A list that ends on a page boundary has no empty last page.
        assert_eq!(all_pages(ids(6), 3).len(), 2);
        assert_eq!(all_pages(vec![], 3), vec![Vec::<String>::new()]);
    }

    #[test]
    fn the_page_size_defaults_and_is_capped() {
        assert_eq!(all_pages(ids(250), 0)[0].len(), DEFAULT_PAGE_SIZE);
        assert_eq!(all_pages(ids(1500), 5000)[0].len(), MAX_PAGE_SIZE);
        let e = page(ids(3), String::clone, -1, "").unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("field `page_size`"), "{}", e.message());
    }

    #[test]
    fn a_page_starts_after_the_last_item_seen_even_when_the_list_changed() {
        let (first, token) = page(ids(6), String::clone, 3, "").unwrap();
        assert_eq!(first, ids(3));
        // id-001 went away and id-004 is new since the first page.
        let mut now: Vec<String> = ids(6).into_iter().filter(|i| i != "id-001").collect();
        now.push("id-0035".into());
        let (second, next) = page(now, String::clone, 3, &token).unwrap();
        assert_eq!(second, ["id-003", "id-0035", "id-004"]);
        assert!(!next.is_empty());
    }

    #[tokio::test]
    async fn all_reads_every_page_and_stops_a_server_that_repeats_a_token() {
        let calls = std::cell::Cell::new(0);
        let call = |token: String| {
            calls.set(calls.get() + 1);
            let answer = page(ids(250), String::clone, 0, &token).map(Response::new);
            async move { answer }
        };
        assert_eq!(all(call, |r| r).await.unwrap(), ids(250));
        assert_eq!(calls.get(), 3, "pages of 100, 100 and 50");
        let stuck = |_| async { Ok(Response::new((vec![1], "same".to_string()))) };
        let e = all(stuck, |r| r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
    }

    #[test]
    fn a_read_page_is_the_page_of_the_whole_list() {
        let list = ids(250);
        let read = |after: Option<&str>, n: usize| -> Result<Vec<String>, Status> {
            Ok(list
                .iter()
                .filter(|i| after.is_none_or(|a| i.as_str() > a))
                .take(n)
                .cloned()
                .collect())
        };
        for size in [0, 1, 3, 100, 125, 250, 300, 5000] {
            let mut token = String::new();
            loop {
                let whole = page(list.clone(), String::clone, size, &token).unwrap();
                let read = page_read(String::clone, size, &token, read).unwrap();
                assert_eq!(read, whole, "size {size}, token {token:?}");
                if whole.1.is_empty() {
                    break;
                }
                token = whole.1;
            }
        }
        assert_eq!(
            page_read(String::clone, -1, "", read).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            page_read(String::clone, 1, "zz", read).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn a_token_not_of_this_list_is_refused() {
        for bad in ["zz", "abc", &hex::encode("other/1")] {
            let e = page(ids(3), String::clone, 1, bad).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
            assert!(e.message().contains("field `page_token`"), "{}", e.message());
        }
    }
}
