package timeline

// HashUnit maps a user ID to [0, 1) with a hash that is the same in every
// process, platform and release: FNV-1a 64 followed by the splitmix64
// finalizer, top 53 bits. The result is exactly representable as a
// float64 and as a Redis sorted-set score.
func HashUnit(user string) float64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	var x uint64 = offset
	for i := 0; i < len(user); i++ {
		x ^= uint64(user[i])
		x *= prime
	}
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// Delayed reports whether user's notifications are held at delay ratio r.
func Delayed(user string, r float64) bool { return HashUnit(user) < r }
