//! Leases on stores that list in key order (S3, GCS, Azure, memory) and on
//! one that does not: a lease is looked up from its trial's own names, and
//! a store's order can delay a trial by one listing, never let two
//! launchers in nor keep a free trial held.

use super::*;
use crate::ledger::test_store::Listing;
use object_store::ObjectStoreExt;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

fn ledger(reversed: bool) -> (Ledger, Arc<Listing>) {
    let store = Arc::new(Listing::new(reversed));
    (Ledger::over_store(store.clone(), "memory:///"), store)
}

/// `owner` takes `trial`'s lease for a minute (or is told who holds it).
async fn take(ledger: &Ledger, trial: &str, owner: &str) -> Result<Lease, Held> {
    ledger
        .acquire_lease("s", trial, &holder(owner), Duration::from_secs(60))
        .await
        .expect("io")
}

fn holder(owner: &str) -> Holder<'_> {
    Holder {
        owner,
        host: "h",
        what: "",
        while_live: false,
    }
}

/// A generation of `trial` by `owner`, expiring `ahead` from now (in the
/// past when negative), written as another launcher would have.
async fn put_generation(
    store: &Listing,
    trial: &str,
    generation: u64,
    owner: &str,
    ahead: chrono::Duration,
) {
    let now = chrono::Utc::now();
    let record = LeaseRecord {
        schema: crate::ledger::records::SCHEMA,
        trial_key: trial.to_string(),
        owner: owner.to_string(),
        host: "h".to_string(),
        generation,
        expires_at: (now + ahead).to_rfc3339(),
        written_at: now.to_rfc3339(),
        what: String::new(),
        taken_at: now.to_rfc3339(),
        while_live: false,
    };
    let bytes = serde_json::to_vec(&record).expect("encode");
    store
        .put(&key("s", trial, generation), bytes.into())
        .await
        .expect("put");
}

/// Among 3,000 live leases of other trials (and a trial whose key begins
/// with this one's), taking a lease reads its own names only; a generation
/// held by another launcher is seen, one that expired is taken over.
#[tokio::test]
async fn a_lease_is_read_from_its_own_names_among_thousands() {
    let (ledger, store) = ledger(false);
    let live = chrono::Duration::minutes(5);
    for i in 0..3000 {
        put_generation(&store, &format!("t{i:04}"), 1, "other", live).await;
    }
    put_generation(&store, "k10", 7, "other", live).await;
    store.names.store(0, Relaxed);
    let a = take(&ledger, "k1", "A")
        .await
        .expect("k1 is free: k10 is another trial");
    assert_eq!(a.record.generation, 1);
    let listed = store.names.swap(0, Relaxed);
    assert!(listed <= 3, "listed {listed} names for one lease");

    let held = take(&ledger, "t1234", "A").await;
    assert!(matches!(held, Err(Held::By { ref owner, .. }) if owner == "other"));

    put_generation(&store, "old", 3, "gone", -live).await;
    store.names.store(0, Relaxed);
    let taken = take(&ledger, "old", "A")
        .await
        .expect("an expired lease is taken over");
    assert_eq!(taken.record.generation, 4);
    assert!(store.names.load(Relaxed) <= 3);
}

/// On a store that lists in reverse order the quick look misses every
/// generation; the create that follows fails where a generation exists,
/// and the whole listing decides: held while held, taken once expired or
/// released, and only ever by one launcher.
#[tokio::test]
async fn a_store_listing_out_of_order_delays_a_lease_never_doubles_it() {
    let (ledger, store) = ledger(true);
    for i in 0..50 {
        put_generation(
            &store,
            &format!("z{i:02}"),
            1,
            "other",
            chrono::Duration::minutes(5),
        )
        .await;
    }
    // An expired owner's generations 1 and 2.
    for g in 1..=2 {
        put_generation(&store, "k", g, "gone", -chrono::Duration::minutes(5)).await;
    }
    let a = take(&ledger, "k", "A")
        .await
        .expect("the expired lease is taken over");
    assert_eq!(a.record.generation, 3);
    let b = take(&ledger, "k", "B").await;
    assert!(matches!(b, Err(Held::By { ref owner, .. }) if owner == "A"));
    ledger.release_lease(&a).await;
    let b = take(&ledger, "k", "B")
        .await
        .expect("released, the trial is free");
    assert_eq!(b.record.generation, 3);

    // Sixteen launchers at once: one lease.
    assert_eq!(racing_winners(Arc::new(ledger), "race").await, 1);
}

/// A store that refuses to list from an offset: every lease is read from
/// the whole listing, and held and free trials are told apart as ever.
#[tokio::test]
async fn a_store_without_listing_from_an_offset_is_listed_whole() {
    let mut listing = Listing::new(false);
    listing.refuses_offset = true;
    let store = Arc::new(listing);
    let ledger = Ledger::over_store(store.clone(), "memory:///");
    let a = take(&ledger, "k", "A").await.expect("free");
    let b = take(&ledger, "k", "B").await;
    assert!(matches!(b, Err(Held::By { ref owner, .. }) if owner == "A"));
    ledger.release_lease(&a).await;
    assert!(take(&ledger, "k", "B").await.is_ok());
}
