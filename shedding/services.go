package shedding

import willowv1 "willow/proto/willow/v1"

// ServiceConfig is the configuration every Willow service node runs: the
// upload front's Begin is Deferred (the front may spill to buffer pool 1
// instead of rejecting), nothing is shed mid-upload (chunks, Commit and
// Status of an admitted upload pass), and pool reads and drains — which
// serve media already acknowledged — are exempt.
func ServiceConfig() Config {
	return Config{
		Deferred: []string{willowv1.Upload_Begin_FullMethodName},
		Exempt: []string{
			willowv1.Upload_Chunks_FullMethodName, willowv1.Upload_Commit_FullMethodName,
			willowv1.Upload_Status_FullMethodName, willowv1.Upload_GetMedia_FullMethodName,
			willowv1.Upload_ReadPool_FullMethodName, willowv1.Upload_BufferStatus_FullMethodName,
			willowv1.Upload_Drain_FullMethodName,
			willowv1.Timeline_Stats_FullMethodName,
		},
	}
}
