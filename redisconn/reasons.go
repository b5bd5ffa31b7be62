package redisconn

// ReasonRedis is the reason of the UNAVAILABLE a service sends when its
// Redis failed or timed out.
const ReasonRedis = "redis"
