package testenv_test

import (
	"context"
	"testing"

	"github.com/minio/minio-go/v7"

	"willow/internal/testenv"
)

func TestRedisAndS3Start(t *testing.T) {
	r := testenv.StartRedis(t)
	if err := r.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis ping: %v", err)
	}
	s := testenv.StartS3(t)
	c := s.Client(t)
	if err := c.MakeBucket(context.Background(), "probe", minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}
}
