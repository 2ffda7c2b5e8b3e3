package committed

import (
	"context"
	"fmt"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"

	"graveler/graveler"
)

// blobS3Client is the one S3 client every s3:// namespace of a store
// shares; built on first use under the store's lock.
type blobS3Client struct {
	client *s3.Client
}

// blobS3DefaultRegion is used when neither BucketConfig nor the AWS chain
// names a region; S3-compatible servers generally ignore it.
const blobS3DefaultRegion = "us-east-1"

// openS3 opens s3://bucket/prefix; called with s.mu held.
func (s *blobBucketStore) openS3(ctx context.Context, ns graveler.StorageNamespace, u *url.URL) (*blob.Bucket, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %q has no bucket", graveler.ErrInvalidStorageNamespace, ns)
	}
	prefix := blobTrimSlashes(u.Path)
	if prefix != "" {
		if err := ValidateBlobName(prefix); err != nil {
			return nil, fmt.Errorf("%w: %q: prefix: %v", graveler.ErrInvalidStorageNamespace, ns, err)
		}
	}
	client, err := s.s3Client(ctx)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", ns, err)
	}
	b, err := s3blob.OpenBucket(ctx, client, u.Host, &s3blob.Options{
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", ns, err)
	}
	if prefix != "" {
		b = blob.PrefixedBucket(b, prefix+"/")
	}
	return b, nil
}

func (s *blobBucketStore) s3Client(ctx context.Context) (*s3.Client, error) {
	if s.s3.client != nil {
		return s.s3.client, nil
	}
	var opts []func(*config.LoadOptions) error
	if s.cfg.S3Region != "" {
		opts = append(opts, config.WithRegion(s.cfg.S3Region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = blobS3DefaultRegion
	}
	// Checksums only when an operation requires them: objects are small
	// enough to send in one request, and S3-compatible servers often lack
	// the trailing-checksum encoding the SDK otherwise uses.
	awsCfg.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	awsCfg.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	s.s3.client = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if s.cfg.S3Endpoint != "" {
			o.BaseEndpoint = aws.String(s.cfg.S3Endpoint)
		}
		o.UsePathStyle = s.cfg.S3ForcePathStyle
	})
	return s.s3.client, nil
}

// s3ReplaceMetadata makes a copy of an object onto itself legal: S3
// refuses one that changes nothing, and a copy that replaces the metadata
// (with what Put wrote) changes the modification time and nothing else.
func s3ReplaceMetadata(as func(any) bool) error {
	var in *s3.CopyObjectInput
	if !as(&in) {
		return fmt.Errorf("touch: not an S3 copy")
	}
	in.MetadataDirective = s3types.MetadataDirectiveReplace
	in.ContentType = aws.String("application/octet-stream")
	return nil
}
