package compress_test

import "willow/flex"

func defaultQuality() int { return flex.DefaultImageQuality }
