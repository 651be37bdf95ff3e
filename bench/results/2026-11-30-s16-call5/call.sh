. dev/call_lib.sh
X=.carry/x
rm -rf $X && mkdir -p $X && tar xJf .carry/pack.tar.xz -C $X
nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee -a $O/run.log
timeout -k 5 200 $X/fs/megaops_gpu_tests --gtest_filter='FullSize/*chain' --gtest_output=json:$O/fullsize_chain.json > $O/fullsize_chain.log 2>&1
echo "rc=$?" | tee -a $O/run.log
grep -E "overlap \(PDL chain\)|PASSED|FAILED" $O/fullsize_chain.log | tee -a $O/run.log
call_finish
