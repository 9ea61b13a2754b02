#include <chrono>
#include <cstdio>
#include <omp.h>
#include <vector>
#include <algorithm>
int main(){
#pragma omp parallel num_threads(2)
  {
    using C=std::chrono::steady_clock;
    auto t0=C::now(); auto last=t0; std::vector<double> gaps;
    while(true){ auto n=C::now(); double g=std::chrono::duration<double,std::micro>(n-last).count(); if(g>5) gaps.push_back(g); last=n; if(std::chrono::duration<double>(n-t0).count()>2.0) break;}
    std::sort(gaps.begin(),gaps.end());
    double s=0; for(double g:gaps) s+=g;
#pragma omp critical
    printf("thr %d: %zu gaps >5us in 2 s, total %.0f us, max %.0f, median %.1f\n",omp_get_thread_num(),gaps.size(),s,gaps.empty()?0:gaps.back(),gaps.empty()?0:gaps[gaps.size()/2]);
  }
}
