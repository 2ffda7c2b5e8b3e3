package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"graveler/etcdkv"
	"graveler/feed"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gcfence"
	"graveler/graveler/ref"
	"graveler/graveler/staging"
	"graveler/kv"
	"graveler/server"
)

// backend is the store, the service built on it and the store's change
// feed.
type backend struct {
	store   kv.Store
	blobs   committed.BlobStore
	service server.Service
	feed    *feed.Feed
}

// Close closes the change feed (before the store whose client it uses),
// the blob store and the kv store.
func (b *backend) Close() error {
	return errors.Join(b.feed.Close(), b.blobs.Close(), b.store.Close())
}

// openBackend connects to etcd and builds the Graveler service on it.
func openBackend(ctx context.Context, cfg *Config, etcd EtcdConfig, log *zap.Logger) (*backend, error) {
	store, err := etcdkv.New(ctx, etcdkv.Config{
		Endpoints:   etcd.Endpoints,
		DialTimeout: etcd.DialTimeout,
		Username:    etcd.Username,
		Password:    etcd.Password,
		TLS:         etcdkv.TLSConfig{CAFile: etcd.CAFile, CertFile: etcd.CertFile, KeyFile: etcd.KeyFile},
		Prefix:      etcd.Prefix,
		Logger:      log.Named("etcdkv"),

		RequestTimeout:       etcd.RequestTimeout,
		DialKeepAliveTime:    etcd.KeepAliveTime,
		DialKeepAliveTimeout: etcd.KeepAliveTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("gravelerd: etcd: %w", err)
	}
	blobs, err := openBlobs(cfg, log)
	if err != nil {
		return nil, errors.Join(err, store.Close())
	}
	svc := newService(store, blobs, cfg, log)
	return &backend{store: store, blobs: blobs, service: svc, feed: feed.New(store, feed.Config{Logger: log.Named("feed")})}, nil
}

// openBlobs opens the blob stores every storage namespace scheme needs
// (file://, s3://, mem://) behind the bounded local range cache.
func openBlobs(cfg *Config, log *zap.Logger) (committed.BlobStore, error) {
	inner := committed.NewBucketStore(committed.BucketConfig{})
	cc := committed.CacheConfig{Dir: cfg.RangeCacheDir, MaxBytes: cfg.RangeCacheSize, Registerer: prometheus.DefaultRegisterer}
	cached, err := committed.NewCachedBlobStore(inner, cc)
	if _, dup := errors.AsType[prometheus.AlreadyRegisteredError](err); dup {
		// Another server in this process (tests) owns the cache metrics.
		log.Warn("range cache metrics already registered; this cache's are not exported")
		cc.Registerer = nil
		cached, err = committed.NewCachedBlobStore(inner, cc)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("gravelerd: range cache: %w", err), inner.Close())
	}
	return cached, nil
}

// newService composes the Graveler service: refs and staged entries on
// the kv store, committed data in the blob store.
func newService(store kv.Store, blobs committed.BlobStore, cfg *Config, log *zap.Logger) *graveler.Graveler {
	refs := ref.New(store, ref.Config{Logger: log.Named("ref"), BranchReadWindow: cfg.ReadWindow})
	return graveler.New(refs, staging.New(store, staging.Config{FencedBatchSize: cfg.FencedBatchSize}),
		// Fenced: the cleaner's GC may delete an object this commit
		// rewrites or refreshes (gcfence).
		gcfence.Wrap(committed.NewManager(blobs, committed.Config{GCGrace: cfg.GCGrace, NodeCacheBytes: cfg.NodeCacheBytes, RangeCacheBytes: cfg.RangeMemoryBytes}), blobs, gcfence.New(store, gcfence.Config{})),
		graveler.Config{BranchCacheTTL: cfg.BranchCacheTTL, MaxSealedTokens: cfg.MaxSealedTokens,
			CommitReadRate: cfg.CommitReadRate, CommitPacing: cfg.CommitPacing, SeparateFenceRead: cfg.SeparateFenceRead})
}
