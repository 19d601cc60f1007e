//! A test store: memory, listing in key order or in reverse, counting the
//! names its listings hand out and the objects read.

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path as ObjPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// An in-memory store whose listings come in reverse key order when
/// `reversed` (as no real store lists, but as no store is bound not to),
/// counting the names its listings hand out.
#[derive(Debug)]
pub(crate) struct Listing {
    inner: InMemory,
    reversed: bool,
    pub names: Arc<AtomicU64>,
    pub gets: AtomicU64,
    /// Bulk deletes asked for (`delete_stream` calls).
    pub deletes: AtomicU64,
    /// Listing from an offset fails, as a store without `start-after`.
    pub refuses_offset: bool,
}

impl std::fmt::Display for Listing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listing(reversed: {})", self.reversed)
    }
}

impl Listing {
    pub fn new(reversed: bool) -> Listing {
        Listing {
            inner: InMemory::new(),
            reversed,
            names: Default::default(),
            gets: Default::default(),
            deletes: Default::default(),
            refuses_offset: false,
        }
    }

    fn ordered(
        &self,
        s: BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let names = Arc::clone(&self.names);
        let counted = move |item| {
            names.fetch_add(1, Relaxed);
            item
        };
        if !self.reversed {
            return s.map(counted).boxed();
        }
        futures::stream::once(async move {
            let mut all: Vec<_> = s.collect().await;
            all.reverse();
            futures::stream::iter(all)
        })
        .flatten()
        .map(counted)
        .boxed()
    }
}

#[async_trait]
impl ObjectStore for Listing {
    async fn put_opts(
        &self,
        location: &ObjPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.gets.fetch_add(1, Relaxed);
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjPath>> {
        self.deletes.fetch_add(1, Relaxed);
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.ordered(self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&ObjPath>,
        offset: &ObjPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if self.refuses_offset {
            return futures::stream::once(async {
                Err(object_store::Error::NotSupported {
                    source: "no start-after here".into(),
                })
            })
            .boxed();
        }
        self.ordered(self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjPath,
        to: &ObjPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &ObjPath,
        to: &ObjPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}
