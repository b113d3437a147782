dist.mesh @mesh <["dp"=2, "tp"=4]>
